"""pyagent-sampler-host: host a pyagent sampler chain in any runtime.

- :mod:`~pyagent_sampler_host.order`: which samplers a chain holds (an order string, or the default
  from the specs' stages), and which distribution a clashing name resolves to;
- :mod:`~pyagent_sampler_host.chain`: the built chain (processors, optional selector), batch updates,
  the processors to run, fused application, per-request parameter checks;
- :mod:`~pyagent_sampler_host.rows` and :mod:`~pyagent_sampler_host.host`: stable rows and token
  selection for a runtime that hands over the requests to sample each step (the reference engine);
- :mod:`~pyagent_sampler_host.fused_mask`: neighbouring temperature / top-k / top-p / min-p processors
  as one kernel call;
- :mod:`~pyagent_sampler_host.parameters`: the per-request parameters the installed samplers declare
  (torch-free, for command lines and request schemas);
- :mod:`~pyagent_sampler_host.tokenizer_info`: a ``tokenizers.Tokenizer`` as a ``TokenizerInfo``.

Importing this package imports nothing; each module imports what it needs.
"""
