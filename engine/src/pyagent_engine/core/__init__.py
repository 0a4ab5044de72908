"""The engine's step loop and what it drives directly.

- :mod:`~pyagent_engine.core.config`: :class:`~pyagent_engine.core.config.EngineConfig`, the cache
  and batch sizes.
- :mod:`~pyagent_engine.core.engine`: :class:`~pyagent_engine.core.engine.Engine`, continuous
  batching: admit, schedule, run the model, sample, detokenize, finish; the lifecycle hooks.
- :mod:`~pyagent_engine.core.runner`: the model runner (inputs, attention metadata, forward, logits).
- :mod:`~pyagent_engine.core.attention_choice`: choosing and building the attention backend.
- :mod:`~pyagent_engine.core.text_tracker`: per-request detokenization, stop strings, stream deltas.
"""
