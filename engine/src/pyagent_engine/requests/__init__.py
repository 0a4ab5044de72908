"""The records every stage of the engine shares: what a request asks and what it gets.

- :mod:`~pyagent_engine.requests.request`: :class:`~pyagent_engine.requests.request.Request` (a
  request as the engine tracks it) and :class:`~pyagent_engine.requests.request.RequestOutput`.
- :mod:`~pyagent_engine.requests.params`: :class:`~pyagent_engine.requests.params.SamplingParams`.
- :mod:`~pyagent_engine.requests.structured_params`: what a request asks of structured output.
- :mod:`~pyagent_engine.requests.structured_report`: what structured output reports about a request.
- :mod:`~pyagent_engine.requests.logprobs`: the per-token log-probability record.
- :mod:`~pyagent_engine.requests.isolation`: keeping a failure with the request that caused it.

This is the bottom layer of the engine: it imports nothing else from it.
"""
