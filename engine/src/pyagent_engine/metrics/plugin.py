"""The metrics plugin (entry point ``metrics`` in the ``pyagent`` group): lifecycle hooks into Prometheus.

Each hook hands its frozen record to the engine's :class:`~pyagent_engine.metrics.prometheus.EngineMetrics`;
nothing here reaches into the engine. Imported while listing plugins: prometheus-client is imported only
when an engine starts. Disable it like any plugin (``PYAGENT_DISABLE_PLUGINS=metrics``).
"""

from __future__ import annotations

from pyagent_core import hookimpl
from pyagent_core.records import EngineInfo, RequestInfo, StepStats


@hookimpl
def pyagent_engine_started(engine: EngineInfo) -> None:
    """Create the engine's registry and metrics."""
    from pyagent_engine.metrics import prometheus

    prometheus.start(engine)


@hookimpl
def pyagent_engine_stopped(engine: EngineInfo) -> None:
    """Drop the engine's registry."""
    from pyagent_engine.metrics import prometheus

    prometheus.stop(engine)


@hookimpl
def pyagent_request_added(engine: EngineInfo, request: RequestInfo) -> None:
    """Count the request as in flight."""
    from pyagent_engine.metrics import prometheus

    if (metrics := prometheus.of(engine.engine_id)) is not None:
        metrics.request_added(request)


@hookimpl
def pyagent_request_finished(engine: EngineInfo, request: RequestInfo, reason: str) -> None:
    """Observe the request's latencies and token counts."""
    from pyagent_engine.metrics import prometheus

    if (metrics := prometheus.of(engine.engine_id)) is not None:
        metrics.request_finished(request, reason)


@hookimpl
def pyagent_step_finished(engine: EngineInfo, stats: StepStats) -> None:
    """Update the scheduler gauges and the token, cache and speculative counters."""
    from pyagent_engine.metrics import prometheus

    if (metrics := prometheus.of(engine.engine_id)) is not None:
        metrics.step_finished(stats)
