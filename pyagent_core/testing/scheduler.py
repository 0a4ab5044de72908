"""Conformance kit for scheduling policies: random histories through a simulated host, replayed.

:class:`SimulatedHost` plays the engine's part without a model: requests arrive, the policy orders
the waiting ones and the host admits from the front, running requests gain a token per tick and
finish at their ``max_tokens`` (the policy hears of it through ``finished``), and preemptions ask the
policy for a victim. Hypothesis draws the operations and the requests (priorities, tenants, deadlines,
lengths). Every answer is checked: an order is a permutation of the waiting ids, a victim is running.
A kit subclass may give a brute-force reference (:meth:`SchedulerConformance.expected_order`,
:meth:`SchedulerConformance.expected_victim`) computed from the whole history; the kit compares every
answer with it. Each history is then replayed on a fresh policy, which must answer the same
(policies are deterministic for a given history). Policies that promise bounded waiting
(``bounded_wait = True``) run a saturated simulation, one arrival and one admission per tick, where
no request may wait more than ``max_wait_ticks`` ticks.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

import attrs
from hypothesis import Phase, given, settings
from hypothesis import strategies as st
from hypothesis.errors import Flaky

from pyagent_core.interfaces.scheduler import RequestView, SchedulerContext, SchedulerState, SchedulingPolicy
from pyagent_core.testing.base import BackendConformance
from pyagent_core.testing.support import kit_settings

TICK_S = 1.0
"""Seconds of the host's clock per simulated tick."""


@attrs.frozen
class Event:
    """One call made to a policy: ``order`` or ``victim`` with a state (and the answer), or ``finished``."""

    call: str
    argument: SchedulerState | RequestView
    answer: Any = None


@attrs.frozen
class NewRequest:
    """What the kit draws for an arriving request."""

    priority: int
    tenant: str | None
    deadline_s: float | None
    prompt_tokens: int
    max_tokens: int


new_requests = st.builds(
    NewRequest, priority=st.integers(-1, 2), tenant=st.sampled_from([None, "a", "b", "c"]),
    deadline_s=st.one_of(st.none(), st.floats(0.5, 8.0)), prompt_tokens=st.integers(1, 64),
    max_tokens=st.integers(1, 24),
)
operations = st.lists(st.one_of(
    st.tuples(st.just("arrive"), new_requests), st.tuples(st.just("admit"), st.integers(0, 3)),
    st.tuples(st.just("tick"), st.integers(1, 3)), st.tuples(st.just("preempt"), st.just(0)),
), max_size=60)


class SimulatedHost:
    """A host without a model driving ``policy``; checks each answer and records it in :attr:`history`.

    ``kit`` supplies the references an answer is compared with.
    """

    def __init__(self, policy: SchedulingPolicy, kit: SchedulerConformance) -> None:
        self.policy, self.kit = policy, kit
        self.now = 0.0
        self.waiting: list[RequestView] = []
        self.running: list[RequestView] = []
        self.history: list[Event] = []
        self.admitted_at: dict[str, float] = {}
        self._ids = 0

    def state(self) -> SchedulerState:
        """The queues as the policy sees them; free blocks shrink as requests run."""
        used = sum(-(-(v.prompt_tokens + v.output_tokens) // 16) for v in self.running)
        total = self.kit.make_context().num_blocks
        return SchedulerState(now=self.now, waiting=tuple(self.waiting), running=tuple(self.running),
                              free_blocks=max(0, total - used), total_blocks=total)

    def arrive(self, new: NewRequest) -> str:
        """Queue a request that arrives now."""
        request_id = f"r{self._ids}"
        self._ids += 1
        self.waiting.append(RequestView(
            request_id=request_id, arrival_time=self.now, priority=new.priority, tenant=new.tenant,
            deadline=None if new.deadline_s is None else self.now + new.deadline_s,
            prompt_tokens=new.prompt_tokens, max_tokens=new.max_tokens, cached_tokens=new.prompt_tokens // 2))
        return request_id

    def admit(self, count: int) -> list[str]:
        """Ask for the order and admit its first ``count`` requests; returns the order."""
        state = self.state()
        order = list(self.policy.order(state))
        waiting = [v.request_id for v in state.waiting]
        assert sorted(order) == sorted(waiting), (
            f"order() returned {order}, not a permutation of the waiting ids {waiting}")
        expected = self.kit.expected_order(self.history, state)
        assert expected is None or order == list(expected), (
            f"order() returned {order}; the reference order is {list(expected or ())} (state {state})")
        self.history.append(Event("order", state, order))
        by_id = {v.request_id: v for v in self.waiting}
        for request_id in order[:count]:
            view = by_id[request_id]
            self.waiting.remove(view)
            self.running.append(attrs.evolve(view, served_tokens=view.served_tokens + view.prompt_tokens
                                             + view.output_tokens))
            self.admitted_at.setdefault(request_id, self.now)
        return order

    def tick(self, ticks: int = 1) -> None:
        """Advance the clock; each running request computes a token per tick and finishes at its ``max_tokens``."""
        for _ in range(ticks):
            self.now += TICK_S
            still = []
            for view in self.running:
                view = attrs.evolve(view, output_tokens=view.output_tokens + 1, served_tokens=view.served_tokens + 1)
                if view.output_tokens >= view.max_tokens:
                    self.policy.finished(view)
                    self.history.append(Event("finished", view))
                else:
                    still.append(view)
            self.running = still

    def preempt(self) -> str | None:
        """Ask for a victim among the running requests and send it back to wait (``None``: none run)."""
        if not self.running:
            return None
        state = self.state()
        victim = self.policy.victim(state)
        running = [v.request_id for v in self.running]
        assert victim in running, f"victim() returned {victim!r}, not one of the running ids {running}"
        expected = self.kit.expected_victim(self.history, state)
        assert expected is None or victim == expected, (
            f"victim() returned {victim!r}; the reference victim is {expected!r} (state {state})")
        self.history.append(Event("victim", state, victim))
        view = next(v for v in self.running if v.request_id == victim)
        self.running.remove(view)
        self.waiting.insert(0, attrs.evolve(view, num_preemptions=view.num_preemptions + 1))
        return victim


def replay(policy: SchedulingPolicy, history: Sequence[Event]) -> None:
    """Make the calls of ``history`` on ``policy`` and check it answers as recorded."""
    for step, event in enumerate(history):
        if event.call == "finished":
            assert isinstance(event.argument, RequestView)
            policy.finished(event.argument)
            continue
        assert isinstance(event.argument, SchedulerState)
        answer = list(policy.order(event.argument)) if event.call == "order" else policy.victim(event.argument)
        assert answer == event.answer, (
            f"replaying the same history, call {step} ({event.call}) answered {answer!r} instead of "
            f"{event.answer!r}: the policy is not deterministic (a clock, unseeded randomness, set order?)")


class SchedulerConformance(BackendConformance):
    """Kit for :class:`SchedulingPolicy` s. Set ``impl`` and ``spec``; ``bounded_wait = True`` for a
    policy under which no request waits forever (checked with ``max_wait_ticks``)."""

    kind = "scheduler"
    bounded_wait: ClassVar[bool] = False
    max_wait_ticks: ClassVar[int] = 40
    max_examples: ClassVar[int] = 120

    def make_context(self) -> SchedulerContext:
        """The context the kit builds policies with."""
        return SchedulerContext(num_blocks=256, block_size=16, max_num_seqs=8, max_num_batched_tokens=256)

    def make_policy(self) -> SchedulingPolicy:
        """Construct the policy under test (override to pass extra setup)."""
        policy: SchedulingPolicy = self.impl(self.make_options(), self.make_context())
        return policy

    def expected_order(self, history: Sequence[Event], state: SchedulerState) -> Sequence[str] | None:
        """The order a brute-force reference gives for ``state`` after ``history`` (``None``: no reference)."""
        return None

    def expected_victim(self, history: Sequence[Event], state: SchedulerState) -> str | None:
        """The victim a brute-force reference picks for ``state`` after ``history`` (``None``: no reference)."""
        return None

    def run_operations(self, ops: Sequence[tuple[str, Any]]) -> SimulatedHost:
        """Drive a new policy through ``ops`` (as :data:`operations` draws them), then drain the host."""
        host = SimulatedHost(self.make_policy(), self)
        for op, argument in ops:
            if op == "arrive":
                host.arrive(argument)
            elif op == "admit":
                host.admit(argument)
            elif op == "tick":
                host.tick(argument)
            else:
                host.preempt()
        while host.waiting or host.running:
            host.admit(1)
            host.tick()
        return host

    def test_random_histories_answer_legally_and_replay(self) -> None:
        @given(ops=operations)
        @kit_settings(self.max_examples)
        def check(ops: list[tuple[str, Any]]) -> None:
            host = self.run_operations(ops)
            replay(self.make_policy(), host.history)

        try:
            check()
        except Flaky as error:
            raise AssertionError(f"the policy answered one history differently on different runs: it is not "
                                 f"deterministic (a clock, unseeded randomness, state shared between instances?)"
                                 f"\n{error}") from error

    def test_empty_waiting_orders_nothing(self) -> None:
        policy = self.make_policy()
        running = (RequestView(request_id="x", arrival_time=0.0),)
        assert list(policy.order(SchedulerState(now=1.0, running=running))) == []
        assert policy.victim(SchedulerState(now=1.0, running=running)) == "x"

    def test_bounded_waiting_when_saturated(self) -> None:
        if not self.bounded_wait:
            return

        @given(arrivals=st.lists(new_requests, min_size=60, max_size=90))
        @settings(kit_settings(self.max_examples), phases=(Phase.explicit, Phase.generate))  # long runs: no shrinking
        def check(arrivals: list[NewRequest]) -> None:
            host = SimulatedHost(self.make_policy(), self)
            arrived = {}
            for new in arrivals[:4]:  # a backlog, then one arrival and one admission per tick
                arrived[host.arrive(new)] = host.now
            for arrival in [*arrivals[4:], *[None] * 4]:
                if arrival is not None:
                    arrived[host.arrive(arrival)] = host.now
                host.admit(1)
                host.tick()
            while host.waiting:
                host.admit(1)
                host.tick()
            waits = {r: (host.admitted_at[r] - t) / TICK_S for r, t in arrived.items()}
            worst = max(waits, key=waits.__getitem__)
            assert waits[worst] <= self.max_wait_ticks, (
                f"request {worst} waited {waits[worst]:.0f} ticks (limit {self.max_wait_ticks}) "
                f"with one arrival and one admission per tick: does it starve?")

        check()

    def test_keeps_options_and_context(self) -> None:
        options, context = self.make_options(), self.make_context()
        policy = self.impl(options, context)
        assert policy.options == options and policy.context is context, (
            f"{self.impl.__name__}(options, context) kept options={policy.options!r}, context={policy.context!r}; "
            "pass both to SchedulingPolicy.__init__")
