"""``run_isolated`` against a brute-force oracle: a batch fails when it holds a culprit (or, for a
batch-only failure, when it holds more than one item); the culprits fail, the others are run together."""

from __future__ import annotations

from collections.abc import Sequence

from hypothesis import given
from hypothesis import strategies as st

from pyagent_engine.requests.isolation import run_isolated


class Stage:
    """Fails on a batch holding any of ``culprits``, or any batch of several items when ``batch_only``."""

    def __init__(self, culprits: set[int], batch_only: bool = False) -> None:
        self.culprits, self.batch_only = culprits, batch_only
        self.calls: list[list[int]] = []

    def __call__(self, items: Sequence[int]) -> list[int]:
        self.calls.append(list(items))
        bad = sorted(self.culprits.intersection(items))
        if bad:
            raise ValueError(f"item {bad[0]}")
        if self.batch_only and len(items) > 1:
            raise RuntimeError("batch too large")
        return [item * 10 for item in items]


@given(st.lists(st.integers(0, 50), unique=True, min_size=1, max_size=12), st.data())
def test_culprits_fail_alone_and_the_others_run_together(items, data):
    culprits = set(data.draw(st.lists(st.sampled_from(items), unique=True)))
    stage = Stage(culprits)
    outcome = run_isolated(items, stage)
    innocent = [item for item in items if item not in culprits]
    if not culprits:
        assert stage.calls == [items] and outcome.failed == []
    else:
        assert outcome.failed == [(item, f"ValueError: item {item}") for item in items if item in culprits]
    assert outcome.kept == innocent
    assert outcome.result == ([item * 10 for item in innocent] if innocent else None)
    if innocent:
        assert stage.calls[-1] == innocent
    assert len(stage.calls) <= 1 + len(items) + 1


@given(st.lists(st.integers(0, 50), unique=True, min_size=2, max_size=12))
def test_a_failure_only_the_batch_causes_fails_every_item(items):
    outcome = run_isolated(items, Stage(set(), batch_only=True))
    assert outcome.kept == [] and outcome.result is None
    assert outcome.failed == [(item, "RuntimeError: batch too large") for item in items]


def test_a_probe_decides_who_is_tried_alone():
    probed: list[int] = []

    def probe(item: int) -> None:
        probed.append(item)
        if item == 2:
            raise KeyError(item)

    outcome = run_isolated([1, 2, 3], Stage({2}), probe)
    assert probed == [1, 2, 3] and outcome.kept == [1, 3] and outcome.failed == [(2, "KeyError: 2")]
