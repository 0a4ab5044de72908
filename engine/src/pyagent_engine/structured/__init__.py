"""Structured output: per-request grammar backends with a fallback chain, compiled off the engine loop.

- :mod:`~pyagent_engine.structured.params`: what a request asks for (constraint, backend, fallback).
- :mod:`~pyagent_engine.structured.checks`: bad input caught before anything is compiled.
- :mod:`~pyagent_engine.structured.report`: what the engine reports per request (backend, skips, jump-forward).
- :mod:`~pyagent_engine.structured.cache`: the LRU cache of compiled grammars.
- :mod:`~pyagent_engine.structured.orchestrator`: backend choice, fallback, thread-pool compilation.
- :mod:`~pyagent_engine.structured.runtime`: the engine side (bitmask per step, accept, jump-forward,
  rollback).
"""
