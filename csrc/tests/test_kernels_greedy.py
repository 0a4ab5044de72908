"""Greedy selection kernel: every ISA variant and the torch fallback choose a pure-Python oracle's
token (the lowest index of the row's largest value) and refuse rows with nothing to choose."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import pyagent_kernels
from pyagent_kernels import KernelArgumentError
from pyagent_kernels.greedy import greedy_select

COMPILED = bool(pyagent_kernels.status()["compiled"])


def oracle(row: list[float]) -> int:
    """The first index of the largest value, by a plain scan."""
    best = 0
    for j, x in enumerate(row):
        if x > row[best]:
            best = j
    return best


#: Few distinct values, so ties are common; -inf often (masked tokens).
VALUES = st.sampled_from([-math.inf, -2.5, -1.0, 0.0, 0.5, 3.0, 1e30, -1e30])
ROWS = st.lists(st.lists(VALUES, min_size=1, max_size=70).filter(lambda r: max(r) > -math.inf),
                min_size=1, max_size=4)


def batch(rows: list[list[float]]) -> torch.Tensor:
    """Rows of different lengths padded with -inf to one width (padding never wins: a row has a
    finite value)."""
    width = max(len(r) for r in rows)
    return torch.tensor([r + [-math.inf] * (width - len(r)) for r in rows], dtype=torch.float32)


@settings(max_examples=60, deadline=None)
@given(rows=ROWS)
def test_torch_fallback_matches_oracle(rows: list[list[float]]) -> None:
    logits = batch(rows)
    assert greedy_select(logits, backend="torch").tolist() == [oracle(r) for r in logits.tolist()]


@pytest.mark.skipif(not COMPILED, reason="the C extension is not built")
@settings(max_examples=60, deadline=None)
@given(rows=ROWS)
def test_c_matches_oracle_on_every_isa(rows: list[list[float]]) -> None:
    logits = batch(rows)
    want = [oracle(r) for r in logits.tolist()]
    for isa in pyagent_kernels.status()["isa_supported"]:
        with pyagent_kernels.using_isa(isa):
            assert greedy_select(logits, backend="c").tolist() == want, isa


@pytest.mark.skipif(not COMPILED, reason="the C extension is not built")
def test_vocabulary_sized_rows_with_tails(c_isa: str) -> None:
    gen = torch.Generator().manual_seed(3)
    for vocab in (49152, 49155, 151936):
        logits = torch.randn(3, vocab, generator=gen)
        logits[1, -1] = logits[1].max() + 1  # the winner in the tail past the last full chunk
        logits[2, 17] = logits[2, 40000] = logits[2].max() + 1  # a tie: the lower id
        assert greedy_select(logits, backend="c").tolist() == [oracle(r) for r in logits.tolist()]


@pytest.mark.parametrize("backend", ["torch", pytest.param("c", marks=pytest.mark.skipif(not COMPILED,
                                                                                          reason="not built"))])
@pytest.mark.parametrize("bad", [math.nan, math.inf, "all -inf"])
def test_rows_without_a_choice_are_named(backend: str, bad: float | str) -> None:
    logits = torch.randn(3, 40)
    if bad == "all -inf":
        logits[1] = -math.inf
    else:
        logits[1, 33] = bad
    with pytest.raises(KernelArgumentError, match="row 1 holds NaN or \\+inf, or only -inf"):
        greedy_select(logits, backend=backend)


def test_bad_tensors_are_refused() -> None:
    with pytest.raises(KernelArgumentError, match="logits"):
        greedy_select(torch.zeros(2, 5, dtype=torch.float64))
    with pytest.raises(KernelArgumentError, match="logits"):
        greedy_select(torch.zeros(5, 2).t())
