"""Earliest deadline first, with requests that missed their deadline demoted.

Each request is ordered by when its first token is due: its ``deadline``, or ``default_deadline_s``
after its arrival when it has none. A request whose deadline has passed can no longer meet it: it
counts as due ``demotion_s`` later, so the requests that can still make theirs go first. Every due
time is finite and no later arrival is due before it arrived, so no request waits forever.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pyagent_core.interfaces.scheduler import RequestView, SchedulerContext, SchedulerState, SchedulingPolicy


class EarliestDeadlinePolicy(SchedulingPolicy):
    """Admits by due time (see the module docstring); preempts the running request due last."""

    def __init__(self, options: Mapping[str, Any], context: SchedulerContext) -> None:
        super().__init__(options, context)
        self.default_deadline_s = float(self.options["default_deadline_s"])
        self.demotion_s = float(self.options["demotion_s"])

    def due(self, view: RequestView, now: float) -> float:
        """When ``view``'s first token counts as due at time ``now``."""
        if view.deadline is None:
            return view.arrival_time + self.default_deadline_s
        return view.deadline + self.demotion_s if now >= view.deadline else view.deadline

    def order(self, state: SchedulerState) -> list[str]:
        """The waiting ids by (due time, arrival time), ties in queue order."""
        ranked = sorted(state.waiting, key=lambda view: (self.due(view, state.now), view.arrival_time))
        return [view.request_id for view in ranked]

    def victim(self, state: SchedulerState) -> str:
        """The running request due last; ties: the last admitted."""
        running = state.running
        return running[max(range(len(running)), key=lambda i: (self.due(running[i], state.now), i))].request_id
