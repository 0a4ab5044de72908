"""Prometheus metrics of an engine, fed by a plugin on the lifecycle hooks.

:mod:`~pyagent_engine.metrics.plugin` is the plugin (entry point ``metrics`` in the ``pyagent`` group);
:mod:`~pyagent_engine.metrics.prometheus` holds one registry per engine and renders it for ``GET /metrics``.
"""
