"""Meta-tests of the scheduler kit: the scaffold's shortest-job-first passes it, broken variants fail it."""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import pytest

from pyagent_core.interfaces.scheduler import (
    RequestView,
    SchedulerContext,
    SchedulerState,
    SchedulingPolicy,
    fcfs_order,
    last_admitted,
)
from pyagent_core.testing.scaffolded import import_template
from pyagent_core.testing.scheduler import Event, SchedulerConformance

reference = import_template("scheduler")
ShortestFirst = reference.impl.KitReference
# The scaffold's own conformance test, run here on the policy it scaffolds.
TestShortestFirst = reference.tests.TestKitReference


class DropsOne(ShortestFirst):
    """Broken: leaves the last waiting request out of the order."""

    def order(self, state: SchedulerState) -> list[str]:
        return super().order(state)[:-1]


class WaitingVictim(ShortestFirst):
    """Broken: names a waiting request as the victim when there is one."""

    def victim(self, state: SchedulerState) -> str:
        return state.waiting[0].request_id if state.waiting else super().victim(state)


_calls = itertools.count()


class Restless(ShortestFirst):
    """Broken: breaks ties by a counter shared between instances, so a replay answers differently."""

    def order(self, state: SchedulerState) -> list[str]:
        ids = super().order(state)
        turn = next(_calls) % max(1, len(ids))
        return ids[turn:] + ids[:turn]


class NewestFirst(ShortestFirst):
    """Starves: the last arrival goes first."""

    def order(self, state: SchedulerState) -> list[str]:
        return [v.request_id for v in sorted(state.waiting, key=lambda v: -v.arrival_time)]


def _kit(impl: type[SchedulingPolicy], **attributes: object) -> SchedulerConformance:
    return type(f"{impl.__name__}Kit", (TestShortestFirst,), {"impl": impl, **attributes})()


class FcfsReferenceKit(TestShortestFirst):
    """A kit whose brute-force reference is first come, first served."""

    def expected_order(self, history: Sequence[Event], state: SchedulerState) -> Sequence[str] | None:
        return fcfs_order(state)

    def expected_victim(self, history: Sequence[Event], state: SchedulerState) -> str | None:
        return last_admitted(state)


@pytest.mark.parametrize(
    ("kit", "check"),
    [
        (_kit(DropsOne), "test_random_histories_answer_legally_and_replay"),
        (_kit(WaitingVictim), "test_random_histories_answer_legally_and_replay"),
        (_kit(Restless), "test_random_histories_answer_legally_and_replay"),
        (_kit(NewestFirst, bounded_wait=True), "test_bounded_waiting_when_saturated"),
        (FcfsReferenceKit(), "test_random_histories_answer_legally_and_replay"),
    ],
    ids=["drops-one", "waiting-victim", "restless", "newest-first-starves", "differs-from-reference"],
)
def test_kit_catches_broken_policy(kit: SchedulerConformance, check: str) -> None:
    with pytest.raises(AssertionError):
        getattr(kit, check)()


def test_context_rejects_non_positive_sizes() -> None:
    with pytest.raises(ValueError, match="num_blocks must be a positive integer, got 0"):
        SchedulerContext(0, 16, 8, 256)
    with pytest.raises(ValueError, match="max_num_seqs must be a positive integer, got -1"):
        SchedulerContext(8, 16, -1, 256)


def test_view_defaults_describe_an_anonymous_request() -> None:
    view = RequestView(request_id="a", arrival_time=0.0)
    assert (view.priority, view.deadline, view.tenant, view.served_tokens) == (0, None, None, 0)
