"""Priority scheduling as vLLM's: smaller priority value first, arrival time breaks ties."""

from __future__ import annotations

from pyagent_core.interfaces.scheduler import RequestView, SchedulerState, SchedulingPolicy


def rank(view: RequestView) -> tuple[int, float]:
    """The sort key: priority, then arrival time."""
    return view.priority, view.arrival_time


class PriorityPolicy(SchedulingPolicy):
    """Admits by (priority, arrival time); preempts the running request that ranks last."""

    def order(self, state: SchedulerState) -> list[str]:
        """The waiting ids by (priority, arrival time), ties in queue order."""
        return [view.request_id for view in sorted(state.waiting, key=rank)]

    def victim(self, state: SchedulerState) -> str:
        """The running request with the largest (priority, arrival time); ties: the last admitted."""
        running = state.running
        return running[max(range(len(running)), key=lambda i: (*rank(running[i]), i))].request_id
