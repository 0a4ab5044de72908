"""Turning a step's logits into tokens: the sampler host and the log probabilities of its choices.

- :mod:`~pyagent_engine.sampling.host`: the shared sampler host (``pyagent-sampler-host``: the chain
  of logits processors and the token selector, selected through the registry, batched over the step's
  rows, with the fused mask) over the engine's requests.
- :mod:`~pyagent_engine.sampling.logprob_scoring`: computing the per-token log-probability records.
"""
