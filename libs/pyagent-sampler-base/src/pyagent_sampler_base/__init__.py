"""Building blocks for pyagent sampler plugins (a library: it registers no sampler).

- :mod:`~pyagent_sampler_base.request_params`: :class:`RequestParam`, a numeric per-request
  parameter with its range and the ``ValueError`` that names a bad value;
- :mod:`~pyagent_sampler_base.token_params`: parameters made of token ids (id lists, id sequences,
  ``logit_bias`` mappings) and the vocabulary bound;
- :mod:`~pyagent_sampler_base.common_params`: ``temperature`` and ``seed``, the parameters several
  samplers read;
- :mod:`~pyagent_sampler_base.row_param_processor`: :class:`RowParamProcessor`, the base of a
  processor set by one per-request parameter;
- :mod:`~pyagent_sampler_base.multi_param`: :class:`MultiParamProcessor` (with :class:`ParamCheck`
  and :class:`ParamRow`), the base of a processor set by several parameters, with per-row state;
- :mod:`~pyagent_sampler_base.logits_checks`: the input checks of every sampler;
- :mod:`~pyagent_sampler_base.precision`: the floating-point type samplers compute in.

Import the modules themselves; this package imports nothing (and no torch) on its own.
"""
