"""Structured output: per-request grammar backends with a fallback chain, compiled off the engine loop.

- :mod:`~pyagent_engine.structured.checks`: bad input caught before anything is compiled.
- :mod:`~pyagent_engine.structured.cache`: the LRU cache of compiled grammars.
- :mod:`~pyagent_engine.structured.orchestrator`: backend choice, fallback, thread-pool compilation.
- :mod:`~pyagent_engine.structured.runtime`: the engine side (bitmask per step, accept, jump-forward,
  rollback).

What a request asks of structured output and what the engine reports about it are request
records: :mod:`pyagent_engine.requests.structured_params` and
:mod:`pyagent_engine.requests.structured_report`.
"""
