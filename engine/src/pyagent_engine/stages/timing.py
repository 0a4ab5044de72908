"""Where a step's time goes, stage by stage: the engine's profiling entry.

``with timed_stages(engine.stages) as times:`` wraps the ``run`` method of every stage object of
the engine for the duration of the block (on the instances; nothing changes outside it, and an
engine that is not being timed pays nothing), then ``times.seconds`` and ``times.calls`` say how
long each stage ran and how often. A stage run again to isolate a failure counts every time.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import attrs


@attrs.define
class StageTimes:
    """Wall-clock seconds spent in each stage's ``run`` and the number of calls, by stage name."""

    seconds: dict[str, float] = attrs.field(factory=dict)
    calls: dict[str, int] = attrs.field(factory=dict)

    def add(self, stage: str, seconds: float) -> None:
        """Count one run of ``stage`` that took ``seconds``."""
        self.seconds[stage] = self.seconds.get(stage, 0.0) + seconds
        self.calls[stage] = self.calls.get(stage, 0) + 1


def _timed(run: Callable[..., Any], stage: str, times: StageTimes) -> Callable[..., Any]:
    def timed(*args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            return run(*args, **kwargs)
        finally:
            times.add(stage, time.perf_counter() - started)

    return timed


@contextlib.contextmanager
def timed_stages(stages: Mapping[str, Any]) -> Iterator[StageTimes]:
    """Time the ``run`` method of each stage object of ``stages`` (name -> stage) while the block runs."""
    times = StageTimes()
    for name, stage in stages.items():
        stage.run = _timed(stage.run, name, times)
    try:
        yield times
    finally:
        for stage in stages.values():
            del stage.run
