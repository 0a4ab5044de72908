"""The engine's side of the scheduling-policy plugins: selection, request views, and a guard.

The scheduler asks the selected policy (``EngineConfig.scheduler``, else the registry's selection
precedence) for the waiting-queue order each step and for a victim when KV blocks run out. It
shows the policy :class:`~pyagent_core.interfaces.scheduler.RequestView` s of its requests, never
the requests themselves. :class:`GuardedPolicy` checks every answer: a policy that raises, or whose
order is not a permutation of the waiting requests or whose victim is not running, is reported with
a warning and first come, first served decides that step instead, so no request is lost; a policy
that fails to start is reported the same way and first come, first served decides every step. With
no scheduling plugin installed at all and none asked for, first come, first served is all there is.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from pyagent_core.errors import ConfigError
from pyagent_core.interfaces.scheduler import (
    RequestView,
    SchedulerContext,
    SchedulerState,
    SchedulingPolicy,
    fcfs_order,
    last_admitted,
)
from pyagent_core.kinds import SCHEDULER
from pyagent_core.registry import Registry, Selection
from pyagent_core.types import SchedulerSpec
from pyagent_engine.requests.isolation import describe

if TYPE_CHECKING:
    from pyagent_engine.requests.request import Request

T = TypeVar("T")


def request_view(request: Request, cached_tokens: int = 0) -> RequestView:
    """What a scheduling policy may know about ``request``."""
    params = request.params
    return RequestView(
        request_id=request.request_id, arrival_time=request.arrival_time, priority=params.priority,
        deadline=None if params.deadline_s is None else request.arrival_time + params.deadline_s,
        tenant=params.tenant, prompt_tokens=len(request.prompt_token_ids),
        output_tokens=len(request.output_token_ids), max_tokens=params.max_tokens, cached_tokens=cached_tokens,
        served_tokens=request.num_served_tokens, num_preemptions=request.num_preemptions,
    )


class GuardedPolicy:
    """A scheduling policy (``None``: first come, first served) whose every answer is checked.

    Args:
        policy: the policy; ``None`` when no scheduling plugin is installed.
        name: its name, for warnings.
        uses_cached_prefix: whether the policy reads the views' ``cached_tokens``.
    """

    def __init__(self, policy: SchedulingPolicy | None, name: str, uses_cached_prefix: bool = False) -> None:
        self.policy, self.name, self.uses_cached_prefix = policy, name, uses_cached_prefix

    def _ask(self, call: str, answer: Callable[[], T], valid: Callable[[T], bool], fallback: Callable[[], T]) -> T:
        if self.policy is None:
            return fallback()
        try:
            result = answer()
            if valid(result):
                return result
            wanted = "a permutation of the waiting requests" if call == "order" else "a running request"
            problem = f"returned {result!r}, which is not {wanted}"
        except Exception as error:
            problem = f"raised {describe(error)}"
        warnings.warn(f"scheduling policy {self.name!r} {problem} in {call}(); {_FALLBACKS[call]}", stacklevel=4)
        return fallback()

    def order(self, state: SchedulerState) -> list[str]:
        """The waiting ids in admission order (fcfs when the policy fails)."""
        waiting = sorted(v.request_id for v in state.waiting)
        return self._ask("order", lambda: list(self.policy.order(state)) if self.policy else [],
                         lambda order: sorted(order) == waiting, lambda: fcfs_order(state))

    def victim(self, state: SchedulerState) -> str:
        """A running id to preempt (the last admitted when the policy fails)."""
        running = {v.request_id for v in state.running}
        return self._ask("victim", lambda: self.policy.victim(state) if self.policy else "",
                         lambda victim: victim in running, lambda: last_admitted(state))

    def finished(self, view: RequestView) -> None:
        """Tell the policy ``view``'s request has left; a failure is only reported."""
        self._ask("finished", lambda: self.policy.finished(view) if self.policy else None,
                  lambda _: True, lambda: None)


#: What happens instead when a policy's call fails, per call.
_FALLBACKS = {
    "order": "first come, first served decides this step instead",
    "victim": "the request admitted last is preempted instead",
    "finished": "the policy was not told; scheduling goes on",
}


def state_of(now: float, waiting: Iterable[RequestView], running: Sequence[Request], free_blocks: int,
             total_blocks: int) -> SchedulerState:
    """A :class:`SchedulerState` of ``waiting`` views and ``running`` requests."""
    return SchedulerState(now=now, waiting=tuple(waiting), running=tuple(request_view(r) for r in running),
                          free_blocks=free_blocks, total_blocks=total_blocks)


def build_scheduling_policy(registry: Registry, name: str | None, options: Mapping[str, Any],
                            context: SchedulerContext, prefix_caching: bool,
                            ) -> tuple[GuardedPolicy, Selection[SchedulerSpec] | None]:
    """The selected policy, guarded, and its selection (``None``: no scheduling plugin is installed, or
    the selected one failed to start, which is reported with a warning: first come, first served then
    schedules every step).

    Raises the registry's selection errors for an unknown or unavailable policy, and
    :class:`ConfigError` for a policy that reads cached prefixes without prefix caching.
    """
    if name is None and not options and not registry.backends(SCHEDULER) and registry.settings.selected(
            SCHEDULER.name) is None:
        return GuardedPolicy(None, "fcfs"), None
    selection = registry.select(SCHEDULER, name, options)
    spec = selection.backend.spec
    if spec.uses_cached_prefix and not prefix_caching:
        raise ConfigError(f"scheduler {spec.name!r} orders by cached prefix and needs prefix caching; "
                          "turn it on (--prefix-caching) or choose another scheduler")
    try:
        policy: SchedulingPolicy = registry.load(selection.backend)(selection.options, context)
    except Exception as error:
        warnings.warn(f"scheduling policy {spec.name!r} failed to start: {describe(error)}; first come, first "
                      "served schedules every step instead", stacklevel=3)
        return GuardedPolicy(None, "fcfs"), None
    return GuardedPolicy(policy, spec.name, spec.uses_cached_prefix), selection
