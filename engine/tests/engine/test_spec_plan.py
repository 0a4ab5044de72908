"""The adaptive stop rule: step costs learned by tokens per step, and the node choice that maximises throughput."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pyagent_core.interfaces.proposer import DraftTree
from pyagent_engine.spec.controller import DraftController
from pyagent_engine.spec.plan import Candidate, StepCosts, choose_nodes


def test_step_costs_use_measurements_then_interpolate_then_extrapolate() -> None:
    costs = StepCosts(prior_slope=0.1)
    assert costs.predict(1) == pytest.approx(1.0) and costs.predict(3) == pytest.approx(1.2)  # the prior
    costs.observe(1, 10.0)
    assert costs.predict(1) == 10.0 and costs.predict(3) == pytest.approx(12.0)  # anchored prior slope
    for tokens, seconds in ((2, 11.0), (4, 13.0), (5, 20.0), (6, 21.0)):
        costs.observe(tokens, seconds)
    assert costs.predict(4) == 13.0 and costs.predict(3) == pytest.approx(12.0)  # between 2 and 4
    line = costs.line()
    assert line is not None and line[1] > 0
    assert costs.predict(8) == pytest.approx(21.0 + 2 * line[1])  # from the largest seen, along the line
    costs.observe(4, 23.0)
    assert costs.predict(4) == pytest.approx(0.9 * 13.0 + 0.1 * 23.0)  # a decayed mean


def test_a_tile_step_in_the_cost_curve_is_respected() -> None:
    """Steps of 1-4 tokens cost about the same, a fifth token costs a lot: three confident nodes are
    worth it at batch 1, a fourth is not."""
    costs = StepCosts()
    for tokens, seconds in ((1, 10.0), (2, 10.5), (3, 11.0), (4, 11.5), (5, 20.0), (6, 20.5)):
        costs.observe(tokens, seconds)
    candidates = [Candidate(0, i, 0.9 ** (i + 1), i + 1) for i in range(5)]
    assert [c.node for c in choose_nodes(candidates, 1, costs)] == [0, 1, 2]


values = st.floats(0.0, 1.0, allow_nan=False)


@settings(max_examples=200, deadline=None)
@given(probabilities=st.lists(values, max_size=7), batch=st.integers(1, 4),
       times=st.lists(st.floats(0.5, 5.0), min_size=12, max_size=12))
def test_the_choice_is_the_best_subset(probabilities: list[float], batch: int, times: list[float]) -> None:
    """Brute force: no subset of the candidates yields more expected tokens per unit of cost."""
    costs = StepCosts()
    for tokens, seconds in enumerate(times, 1):
        costs.observe(tokens, seconds)
    candidates = [Candidate(0, i, p, 1) for i, p in enumerate(probabilities)]
    chosen = choose_nodes(candidates, batch, costs)

    def value(subset: tuple[Candidate, ...]) -> float:
        return (batch + sum(c.probability for c in subset)) / costs.predict(batch + len(subset))

    best = max(value(s) for k in range(len(candidates) + 1) for s in itertools.combinations(candidates, k))
    assert value(tuple(chosen)) == pytest.approx(best, rel=1e-12)


def test_plan_keeps_parents_limits_and_costs() -> None:
    controller = DraftController(8)
    for tokens in range(1, 12):  # every extra token costs 1% of a step: nearly free
        controller.observe_step(tokens, 1.0 + 0.01 * tokens)
    tree = DraftTree([1, 2, 3, 4], [-1, 0, -1, 2], [0.9, 0.8, 0.3, 0.29])
    (kept,) = controller.plan([("r", tree, 8)], 1)
    assert kept == tree
    (limited,) = controller.plan([("r", tree, 2)], 1)
    assert limited is not None and limited.token_ids == (1, 2)  # the two most probable, a chain
    expensive = DraftController(8)
    for tokens in range(1, 12):  # every extra token costs a whole step
        expensive.observe_step(tokens, float(tokens))
    assert expensive.plan([("r", tree, 8)], 1) == [None]
    (unplanned,) = DraftController(8, adaptive=False).plan([("r", tree, 3)], 1)
    assert unplanned is not None and unplanned.token_ids == (1, 2, 3)


def test_plan_weighs_the_whole_batch() -> None:
    """Two requests, one confident and one not: at a linear cost, only the confident draft is kept."""
    controller = DraftController(8)
    for tokens in range(2, 20):
        controller.observe_step(tokens, 1.0 + 0.1 * tokens)
    good = DraftTree.chain([5, 6, 7], [0.95, 0.9, 0.85])
    poor = DraftTree.chain([8, 9], [0.1, 0.05])
    assert controller.plan([("a", good, 8), ("b", poor, 8)], 2) == [good, None]


def test_a_request_whose_scored_drafts_fail_gets_lower_probabilities() -> None:
    controller = DraftController(8)
    draft = DraftTree.chain([1, 2], [0.8, 0.6])
    for _ in range(10):
        controller.verified("liar", 0, 2, expected=1.4)
        controller.verified("honest", 1, 2, expected=1.4)
    assert controller.probabilities("liar", draft) < controller.probabilities("honest", draft)
    assert controller.probabilities("new", draft) == [0.8, 0.6]


def test_a_probing_request_keeps_its_first_node() -> None:
    controller = DraftController(8, probe_every=2)
    for tokens in range(1, 12):
        controller.observe_step(tokens, 1.0 + tokens)  # a token costs as much as a step's fixed part
    for _ in range(20):
        controller.verified("r", 0, 1)
    threshold = controller.threshold(1)
    assert controller.budget("r", threshold) == 0 and controller.budget("r", threshold) == 1  # the probe
    (probe,) = controller.plan([("r", DraftTree.chain([3, 4]), 1)], 1)
    assert probe is not None and probe.token_ids == (3,)
