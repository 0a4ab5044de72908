"""What each policy promises, on small hand-made states and a simulated four-tenant load."""

from __future__ import annotations

from pyagent_core.interfaces.scheduler import RequestView, SchedulerContext, SchedulerState
from pyagent_core.testing.scheduler import NewRequest, SchedulerConformance, SimulatedHost
from pyagent_scheduler_policies.edf import EarliestDeadlinePolicy
from pyagent_scheduler_policies.fair import FairPolicy
from pyagent_scheduler_policies.fcfs import FcfsPolicy
from pyagent_scheduler_policies.hrrn import ResponseRatioPolicy
from pyagent_scheduler_policies.plugin import SPECS
from pyagent_scheduler_policies.priority import PriorityPolicy

CONTEXT = SchedulerContext(num_blocks=64, block_size=16, max_num_seqs=4, max_num_batched_tokens=256)
DEFAULTS = {spec.name: {k: o.default for k, o in spec.options.items()} for spec in SPECS}


def view(request_id: str, arrival: float, **fields: object) -> RequestView:
    return RequestView(request_id=request_id, arrival_time=arrival, **fields)  # type: ignore[arg-type]


def test_priority_orders_by_value_then_arrival_and_preempts_the_least_urgent() -> None:
    policy = PriorityPolicy({}, CONTEXT)
    waiting = (view("a", 0.0, priority=1), view("b", 1.0, priority=0), view("c", 0.5, priority=0))
    running = (view("x", 0.0, priority=0), view("y", 0.1, priority=2), view("z", 0.2, priority=1))
    state = SchedulerState(now=2.0, waiting=waiting, running=running)
    assert policy.order(state) == ["c", "b", "a"]
    assert policy.victim(state) == "y"


def test_edf_demotes_a_request_that_missed_its_deadline() -> None:
    policy = EarliestDeadlinePolicy(DEFAULTS["edf"], CONTEXT)
    waiting = (view("late", 0.0, deadline=1.0), view("soon", 1.5, deadline=4.0), view("none", 0.0))
    assert policy.order(SchedulerState(now=0.5, waiting=waiting)) == ["late", "soon", "none"]
    assert policy.order(SchedulerState(now=2.0, waiting=waiting)) == ["soon", "late", "none"]


def test_hrrn_prefers_the_short_request_but_not_forever() -> None:
    policy = ResponseRatioPolicy(DEFAULTS["hrrn"], CONTEXT)
    long_request = view("long", 0.0, prompt_tokens=500, max_tokens=200)
    short_request = view("short", 0.0, prompt_tokens=10, max_tokens=5)
    assert policy.order(SchedulerState(now=1.0, waiting=(long_request, short_request))) == ["short", "long"]
    fresh_short = view("fresh", 100.0, prompt_tokens=10, max_tokens=5)
    assert policy.order(SchedulerState(now=100.0, waiting=(fresh_short, long_request))) == ["long", "fresh"]


def jain(values: list[float]) -> float:
    return sum(values) ** 2 / (len(values) * sum(v * v for v in values))


def served_share(policy_type: type, options: dict[str, object]) -> float:
    """Jain's index of the tokens served per tenant while one tenant floods the queue and three others
    each send a request every third tick (together as many as the host admits)."""
    kit = SchedulerConformance()
    kit.make_context = lambda: CONTEXT  # type: ignore[method-assign]
    host = SimulatedHost(policy_type(options, CONTEXT), kit)
    for _ in range(60):
        host.arrive(NewRequest(priority=0, tenant="heavy", deadline_s=None, prompt_tokens=8, max_tokens=4))
    for tick in range(60):
        host.arrive(NewRequest(priority=0, tenant="abc"[tick % 3], deadline_s=None, prompt_tokens=8, max_tokens=4))
        host.admit(1)
        host.tick()
    served = dict.fromkeys(["heavy", "a", "b", "c"], 0)
    for event in host.history:
        if event.call == "finished":
            served[event.argument.tenant] += event.argument.served_tokens
    return jain(list(served.values()))


def test_fair_shares_service_where_fcfs_does_not() -> None:
    assert served_share(FairPolicy, DEFAULTS["fair"]) >= 0.95
    assert served_share(FcfsPolicy, {}) < 0.8


def test_fair_gives_no_credit_for_time_spent_idle_between_two_order_calls() -> None:
    """The engine asks for an order only in steps with waiting requests. Here the light tenant's
    queue empties, it stays idle while the heavy one is served alone, then both send a request: VTC
    lifts the light tenant to the counter of the tenant that left the queue last, so the earlier
    request (the heavy tenant's) goes first; without the lift the light tenant would jump ahead."""
    policy = FairPolicy(DEFAULTS["fair"], CONTEXT)
    first = (view("l1", 0.0, tenant="light", prompt_tokens=10), view("h1", 0.1, tenant="heavy", prompt_tokens=10))
    assert policy.order(SchedulerState(now=0.2, waiting=first)) == ["l1", "h1"]
    policy.finished(view("l1", 0.0, tenant="light", prompt_tokens=10, output_tokens=1, max_tokens=1,
                         served_tokens=11))
    heavy_ran = view("h1", 0.1, tenant="heavy", prompt_tokens=10, output_tokens=495, max_tokens=1000,
                     served_tokens=505)
    second = (view("h2", 5.0, tenant="heavy", prompt_tokens=10), view("l2", 6.0, tenant="light", prompt_tokens=10))
    assert policy.order(SchedulerState(now=7.0, waiting=second, running=(heavy_ran,))) == ["h2", "l2"]
    assert policy.counters["light"] == policy.counters["heavy"]
