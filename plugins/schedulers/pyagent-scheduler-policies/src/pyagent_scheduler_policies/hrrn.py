"""Highest response ratio next: (time waited + expected service) / expected service, highest first.

Among requests that have waited as long, the one with the least work goes first, as in shortest job
first; but a request's ratio grows with its wait, so a long request is admitted once it has waited
long enough relative to the others and never starves. Expected service, in seconds: the prompt
tokens not cached at ``prefill_tokens_per_s`` plus the tokens left to generate at ``decode_tokens_per_s``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pyagent_core.interfaces.scheduler import RequestView, SchedulerContext, SchedulerState, SchedulingPolicy


class ResponseRatioPolicy(SchedulingPolicy):
    """Admits by response ratio, highest first (ties: arrival); preempts the last admitted."""

    def __init__(self, options: Mapping[str, Any], context: SchedulerContext) -> None:
        super().__init__(options, context)
        self.prefill_rate = float(self.options["prefill_tokens_per_s"])
        self.decode_rate = float(self.options["decode_tokens_per_s"])

    def service_s(self, view: RequestView) -> float:
        """The seconds ``view`` is expected to take once admitted (always > 0)."""
        prompt = max(1, view.prompt_tokens + view.output_tokens - view.cached_tokens)
        return prompt / self.prefill_rate + max(1, view.max_tokens - view.output_tokens) / self.decode_rate

    def ratio(self, view: RequestView, now: float) -> float:
        """``view``'s response ratio at ``now``."""
        service = self.service_s(view)
        return (max(0.0, now - view.arrival_time) + service) / service

    def order(self, state: SchedulerState) -> list[str]:
        """The waiting ids by (-ratio, arrival time), ties in queue order."""
        ranked = sorted(state.waiting, key=lambda view: (-self.ratio(view, state.now), view.arrival_time))
        return [view.request_id for view in ranked]
