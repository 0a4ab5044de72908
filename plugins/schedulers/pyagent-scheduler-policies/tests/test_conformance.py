"""Every policy through the scheduler kit, each against a brute-force reference where one exists.

The brute-force references try every permutation of the waiting requests (up to six of them) and
keep the one whose keys read smallest, the queue position breaking ties: what a stable sort by that
key must return. ``fair`` is checked against :func:`vtc_reference`, which recomputes the tenants'
counters from the whole history at every call.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from typing import Any

from pyagent_core.interfaces.scheduler import RequestView, SchedulerState
from pyagent_core.testing.scheduler import Event, SchedulerConformance
from pyagent_scheduler_policies.edf import EarliestDeadlinePolicy
from pyagent_scheduler_policies.fair import FairPolicy
from pyagent_scheduler_policies.fcfs import FcfsPolicy
from pyagent_scheduler_policies.hrrn import ResponseRatioPolicy
from pyagent_scheduler_policies.lpm import LongestPrefixPolicy
from pyagent_scheduler_policies.plugin import SPECS
from pyagent_scheduler_policies.priority import PriorityPolicy

SPEC = {spec.name: spec for spec in SPECS}
Key = Callable[[RequestView, SchedulerState], Any]


def brute_force_order(state: SchedulerState, key: Key) -> list[str] | None:
    """The permutation of the waiting ids whose (key, queue position) sequence is smallest (``None``: > 6)."""
    if len(state.waiting) > 6:
        return None
    keyed = [((key(view, state), position), view.request_id) for position, view in enumerate(state.waiting)]
    best = min(itertools.permutations(keyed), key=lambda perm: [k for k, _ in perm])
    return [request_id for _, request_id in best]


def brute_force_victim(state: SchedulerState, key: Key) -> str:
    """The running request with the largest (key, admission position)."""
    candidates = [((key(view, state), position), view.request_id) for position, view in enumerate(state.running)]
    return max(candidates)[1]


class TestFcfs(SchedulerConformance):
    impl, spec = FcfsPolicy, SPEC["fcfs"]
    bounded_wait = True
    max_wait_ticks = 6  # the backlog of four, plus the tick of admission

    def expected_order(self, history: Sequence[Event], state: SchedulerState) -> list[str] | None:
        return brute_force_order(state, lambda v, s: v.arrival_time)

    def expected_victim(self, history: Sequence[Event], state: SchedulerState) -> str | None:
        return brute_force_victim(state, lambda v, s: 0)


class TestPriority(SchedulerConformance):
    impl, spec = PriorityPolicy, SPEC["priority"]

    def expected_order(self, history: Sequence[Event], state: SchedulerState) -> list[str] | None:
        return brute_force_order(state, lambda v, s: (v.priority, v.arrival_time))

    def expected_victim(self, history: Sequence[Event], state: SchedulerState) -> str | None:
        return brute_force_victim(state, lambda v, s: (v.priority, v.arrival_time))


class TestLongestPrefix(SchedulerConformance):
    impl, spec = LongestPrefixPolicy, SPEC["lpm"]

    def expected_order(self, history: Sequence[Event], state: SchedulerState) -> list[str] | None:
        return brute_force_order(state, lambda v, s: (-v.cached_tokens, v.arrival_time))


def edf_due(view: RequestView, state: SchedulerState) -> float:
    """EDF's due time with the default options (30 s without a deadline, 10 s demotion once missed)."""
    if view.deadline is None:
        return view.arrival_time + 30.0
    missed = state.now >= view.deadline
    return view.deadline + (10.0 if missed else 0.0)


class TestEarliestDeadline(SchedulerConformance):
    impl, spec = EarliestDeadlinePolicy, SPEC["edf"]
    bounded_wait = True

    def expected_order(self, history: Sequence[Event], state: SchedulerState) -> list[str] | None:
        return brute_force_order(state, lambda v, s: (edf_due(v, s), v.arrival_time))

    def expected_victim(self, history: Sequence[Event], state: SchedulerState) -> str | None:
        return brute_force_victim(state, edf_due)


def hrrn_ratio(view: RequestView, state: SchedulerState) -> float:
    """The response ratio with the default rates (1000 prompt tokens/s, 20 tokens/s generated)."""
    service = (max(1, view.prompt_tokens + view.output_tokens - view.cached_tokens) / 1000
               + max(1, view.max_tokens - view.output_tokens) / 20)
    return (max(0.0, state.now - view.arrival_time) + service) / service


class TestResponseRatio(SchedulerConformance):
    impl, spec = ResponseRatioPolicy, SPEC["hrrn"]
    bounded_wait = True
    max_wait_ticks = 100  # the backlog times the ratio of the longest to the shortest expected service, about 25

    def expected_order(self, history: Sequence[Event], state: SchedulerState) -> list[str] | None:
        return brute_force_order(state, lambda v, s: (-hrrn_ratio(v, s), v.arrival_time))


def vtc_reference(history: Sequence[Event], state: SchedulerState,
                  ordering: bool = True) -> tuple[dict[str, float], list[str]]:
    """Tenant counters and the VTC order for ``state`` (an ``order`` call, else a ``victim`` call),
    recomputed from the whole history.

    Service per request is the largest seen for it (prompt tokens computed at weight 1, generated
    tokens at weight 2). At each order call a tenant none of whose waiting requests waited at the
    previous order call is lifted to the lowest counter of the tenants that have such a request, else
    to the counter of the tenant of the last request of the previous order that no longer waits.
    """
    counters: dict[str, float] = {}
    charged: dict[str, float] = {}
    previous: list[RequestView] = []  # the waiting views of the previous order call, in its order

    def charge(views: Sequence[RequestView]) -> None:
        for view in views:
            service = max(0, view.served_tokens - view.output_tokens) + 2 * view.output_tokens
            tenant = view.tenant or ""
            if service > charged.get(view.request_id, 0):
                counters[tenant] = counters.get(tenant, 0.0) + service - charged.get(view.request_id, 0)
                charged[view.request_id] = service

    def lift(seen: SchedulerState, order: Sequence[str]) -> None:
        nonlocal previous
        waiting_now = {v.request_id for v in seen.waiting}
        before = {v.request_id for v in previous}
        kept = {v.tenant or "" for v in seen.waiting if v.request_id in before}
        by_id = {v.request_id: v for v in previous}
        gone = [by_id[r].tenant or "" for r in previous_order if r not in waiting_now]
        base = kept or set(gone[-1:])
        for tenant in {v.tenant or "" for v in seen.waiting} - kept:
            if base:
                counters[tenant] = max(counters.get(tenant, 0.0), min(counters.get(t, 0.0) for t in base))
        previous = list(seen.waiting)
        previous_order[:] = order

    previous_order: list[str] = []
    for event in history:
        if event.call == "finished":
            charge([event.argument])
            charged.pop(event.argument.request_id, None)
        else:
            charge(event.argument.running + event.argument.waiting)
            if event.call == "order":
                lift(event.argument, event.answer)
    charge(state.running + state.waiting)
    if ordering:
        lift(state, [])
    pending = sorted(state.waiting, key=lambda v: v.arrival_time)
    projected = dict(counters)
    order: list[str] = []
    while pending:
        heads = {}
        for view in pending:
            heads.setdefault(view.tenant or "", view)
        tenant = min(heads, key=lambda t: (projected.get(t, 0.0), heads[t].arrival_time, t))
        order.append(heads[tenant].request_id)
        pending.remove(heads[tenant])
        head = heads[tenant]
        projected[tenant] = projected.get(tenant, 0.0) + max(1, head.prompt_tokens - head.cached_tokens)
    return counters, order


class TestFair(SchedulerConformance):
    impl, spec = FairPolicy, SPEC["fair"]
    bounded_wait = True

    def expected_order(self, history: Sequence[Event], state: SchedulerState) -> list[str] | None:
        return vtc_reference(history, state)[1]

    def expected_victim(self, history: Sequence[Event], state: SchedulerState) -> str | None:
        counters = vtc_reference(history, state, ordering=False)[0]
        return brute_force_victim(state, lambda v, s: counters.get(v.tenant or "", 0.0))
