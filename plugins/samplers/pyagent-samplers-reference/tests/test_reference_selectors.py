"""Greedy ties and errors; multinomial frequencies, seeding and reproducibility across batches."""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pytest
import torch

from pyagent_core.interfaces.sampler import AddedRequest, BatchUpdate, MovedRequest, MoveKind, SamplerContext
from pyagent_samplers_reference.greedy import GreedySelector
from pyagent_samplers_reference.multinomial import MultinomialSelector

NEG_INF = float("-inf")
LOGITS = [2.0, 1.0, 0.5, 0.0, -1.0, NEG_INF]
# Chi-square critical value for 4 degrees of freedom (5 finite tokens) at significance 0.001.
CHI2_CRITICAL_DF4 = 18.467


def multinomial(params: Sequence[Mapping[str, Any]], seed: int | None = None) -> MultinomialSelector:
    """A multinomial selector over ``LOGITS`` holding one request per params dict."""
    selector = MultinomialSelector({"seed": seed}, SamplerContext(len(LOGITS)))
    added = tuple(AddedRequest(index=i, params=p) for i, p in enumerate(params))
    selector.update_state(BatchUpdate(batch_size=len(params), added=added))
    return selector


def chi_square(tokens: torch.Tensor) -> float:
    """Pearson's statistic of ``tokens`` against ``softmax(LOGITS)``; masked tokens must never occur."""
    counts = np.bincount(tokens.numpy(), minlength=len(LOGITS))
    assert counts[-1] == 0, "a -inf token was drawn"
    logits = np.array(LOGITS[:-1])
    expected = np.exp(logits - logits.max())
    expected = expected / expected.sum() * len(tokens)
    return float(((counts[:-1] - expected) ** 2 / expected).sum())


def batch_of(rows: int) -> torch.Tensor:
    """``LOGITS`` repeated on ``rows`` rows."""
    return torch.tensor([LOGITS] * rows)


def test_greedy_takes_the_lowest_id_among_ties() -> None:
    logits = torch.tensor([[1.0, 3.0, 3.0, 0.0], [2.0, 2.0, 2.0, 2.0], [NEG_INF, 5.0, NEG_INF, 5.0]])
    assert GreedySelector({}, SamplerContext(4)).select(logits).tolist() == [1, 0, 1]


@pytest.mark.parametrize("bad", [NEG_INF, float("nan"), float("inf")])
@pytest.mark.parametrize("selector_type", [GreedySelector, MultinomialSelector])
def test_selectors_reject_rows_without_a_finite_maximum(selector_type: type, bad: float) -> None:
    selector = selector_type({}, SamplerContext(3))
    selector.update_state(BatchUpdate(2, added=(AddedRequest(0, {}), AddedRequest(1, {}))))
    logits = torch.tensor([[0.0, 1.0, 2.0], [NEG_INF, NEG_INF, bad]])
    with pytest.raises(ValueError, match=r"rows \[1\]"):
        selector.select(logits)


def test_multinomial_engine_generator_follows_softmax() -> None:
    tokens = multinomial([{}] * 20000, seed=1234).select(batch_of(20000))
    assert chi_square(tokens) < CHI2_CRITICAL_DF4


def test_multinomial_seeded_requests_follow_softmax() -> None:
    tokens = multinomial([{"seed": s} for s in range(5000)]).select(batch_of(5000))
    assert chi_square(tokens) < CHI2_CRITICAL_DF4


def test_multinomial_seeded_request_follows_softmax_over_steps() -> None:
    selector = multinomial([{"seed": 42}])
    tokens = []
    for _ in range(3000):
        selector.update_state(None)
        tokens.append(selector.select(batch_of(1)))
    assert chi_square(torch.cat(tokens)) < CHI2_CRITICAL_DF4


def test_multinomial_engine_seed_option_makes_unseeded_draws_repeat() -> None:
    first = multinomial([{}] * 200, seed=5).select(batch_of(200))
    again = multinomial([{}] * 200, seed=5).select(batch_of(200))
    other = multinomial([{}] * 200, seed=6).select(batch_of(200))
    assert torch.equal(first, again)
    assert not torch.equal(first, other)


def test_multinomial_seeded_request_repeats_whatever_the_batch() -> None:
    """A seeded request draws the same tokens alone and in a changing batch.

    In the batch it changes rows while other requests, seeded and unseeded, come and go.
    """
    rng = random.Random(0)
    vocab_size = 50
    steps = 40
    target = {"seed": 2024}
    target_logits = [
        torch.randn(vocab_size, generator=torch.Generator().manual_seed(step)) for step in range(steps)
    ]

    alone = MultinomialSelector({}, SamplerContext(vocab_size))
    alone.update_state(BatchUpdate(1, added=(AddedRequest(0, target),)))
    expected = []
    for step in range(steps):
        expected.append(int(alone.select(target_logits[step].unsqueeze(0))[0]))
        alone.update_state(None)

    batched = MultinomialSelector({"seed": 1}, SamplerContext(vocab_size))
    others: tuple[dict[str, int], ...] = ({}, {"seed": 7}, {}, {"seed": 8})
    added = [AddedRequest(i, p) for i, p in enumerate(others)] + [AddedRequest(len(others), target)]
    batched.update_state(BatchUpdate(len(added), added=tuple(added)))
    row, size = len(others), len(added)
    for step in range(steps):
        logits = torch.randn(size, vocab_size)
        logits[row] = target_logits[step]
        assert int(batched.select(logits)[row]) == expected[step], f"step {step}, row {row} of {size}"
        # replace one other request with a new one, then swap the target somewhere else
        victim = rng.choice([r for r in range(size) if r != row])
        new_other = AddedRequest(victim, rng.choice(({}, {"seed": step})))
        destination = rng.randrange(size)
        swap = () if destination == row else (MovedRequest(row, destination, MoveKind.SWAP),)
        batched.update_state(BatchUpdate(size, removed=(victim,), added=(new_other,), moved=swap))
        row = destination


def test_multinomial_rejects_bad_seeds_naming_row_and_value() -> None:
    selector = MultinomialSelector({}, SamplerContext(4))
    with pytest.raises(ValueError, match=r"request at row 1: seed=-3 is invalid; seed must be an integer"):
        selector.update_state(BatchUpdate(2, added=(AddedRequest(0, {}), AddedRequest(1, {"seed": -3}))))
    with pytest.raises(ValueError, match=r"option of the multinomial sampler: seed=1.5"):
        MultinomialSelector({"seed": 1.5}, SamplerContext(4))
