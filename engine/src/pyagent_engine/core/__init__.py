"""The engine and what it is built from.

- :mod:`~pyagent_engine.core.config`: :class:`~pyagent_engine.core.config.EngineConfig`, the cache
  and batch sizes.
- :mod:`~pyagent_engine.core.engine`: :class:`~pyagent_engine.core.engine.Engine`, continuous
  batching: requests in, the step loop over the stages of :mod:`pyagent_engine.stages`, outputs
  out; the lifecycle hooks.
- :mod:`~pyagent_engine.core.attention_choice`: choosing and building the attention backend.
"""
