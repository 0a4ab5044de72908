"""First come, first served: admit by arrival time, preempt the request admitted last."""

from __future__ import annotations

from pyagent_core.interfaces.scheduler import SchedulerState, SchedulingPolicy, fcfs_order


class FcfsPolicy(SchedulingPolicy):
    """The waiting requests by arrival time; the victim is the last admitted (the interface's default)."""

    def order(self, state: SchedulerState) -> list[str]:
        """The waiting ids by arrival time (ties: queue order)."""
        return fcfs_order(state)
