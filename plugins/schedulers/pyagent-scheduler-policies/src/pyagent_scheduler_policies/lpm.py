"""Longest prefix match (SGLang's lpm): the waiting request with the most cached prompt tokens first."""

from __future__ import annotations

from pyagent_core.interfaces.scheduler import SchedulerState, SchedulingPolicy


class LongestPrefixPolicy(SchedulingPolicy):
    """Admits by cached prefix length, longest first, ties by arrival; its spec asks for ``cached_tokens``."""

    def order(self, state: SchedulerState) -> list[str]:
        """The waiting ids by (-cached tokens, arrival time), ties in queue order."""
        ranked = sorted(state.waiting, key=lambda view: (-view.cached_tokens, view.arrival_time))
        return [view.request_id for view in ranked]
