"""Turning a step's logits into tokens: the sampler chain and the log probabilities of its choices.

- :mod:`~pyagent_engine.sampling.chain`: the chain of logits processors and the token selector,
  selected through the registry, batched over the step's rows.
- :mod:`~pyagent_engine.sampling.fused_mask`: consecutive mask steps fused into one kernel call.
- :mod:`~pyagent_engine.sampling.logprob_scoring`: computing the per-token log-probability records.
"""
