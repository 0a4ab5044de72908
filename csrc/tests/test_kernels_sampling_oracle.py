"""apply_sampling_mask against an independent brute-force oracle: a full numpy sort per row and the
transformers-style definitions (normalised cumulative probabilities, prob >= min_p * max_prob)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import pyagent_kernels
from pyagent_kernels import Backend
from pyagent_kernels.sampling import apply_sampling_mask

COMPILED = bool(pyagent_kernels.status()["compiled"])
BACKENDS: list[Backend] = ["c", "torch"] if COMPILED else ["torch"]
# The kernels take probabilities as float32 exp(x - max) (about 1e-7 relative error) summed in
# float64; cases whose top-p / min-p decision lies closer than this to its cut-off are not compared.
CUT_OFF_MARGIN = 1e-5
Params = dict[str, torch.Tensor | None]


def oracle_row(
    x: np.ndarray, t: float | None, k: int | None, p: float | None, q: float | None
) -> tuple[np.ndarray, float]:
    """The masked row and the distance of the closest top-p / min-p decision to its cut-off."""
    x = x.astype(np.float32)
    if t is not None and t > 0 and t != 1:
        x = x / np.float32(t)
    if np.all(x == -np.inf):
        return x, math.inf
    margin = math.inf
    keep = np.ones(x.shape, dtype=bool)
    ordered = np.sort(x)[::-1]
    if k is not None and 0 < k < len(x):
        keep &= x >= ordered[k - 1]
    if p is not None and p < 1:
        kept = np.sort(x[keep])[::-1].astype(np.float64)
        probs = np.exp(kept - kept[0])
        cum = np.cumsum(probs / probs.sum())
        levels = np.r_[kept[1:] != kept[:-1], True]  # cumulative mass at the end of each tie group
        margin = min(margin, float(np.min(np.abs(cum[levels] - p))))
        crossed = np.nonzero(cum >= p)[0]
        keep &= x >= (kept[crossed[0]] if len(crossed) else -np.inf)
    if q is not None and q > 0:
        top = x[keep].max()
        rel = np.exp(x.astype(np.float64) - top)
        below = keep & (x < top)  # exp(0) == 1 exactly, so the maximum itself is never in doubt
        margin = min(margin, float(np.min(np.abs(rel[below] - q), initial=math.inf)))
        keep &= rel >= q
    return np.where(keep, x, np.float32(-np.inf)), margin


def oracle(logits: torch.Tensor, params: Params) -> tuple[torch.Tensor, torch.Tensor]:
    """oracle_row over every row: the masked rows and each row's margin."""

    def value(name: str, row: int) -> Any:
        """Row ``row`` of parameter ``name`` as a Python number, or None."""
        tensor = params.get(name)
        return None if tensor is None else tensor[row].item()

    rows, margins = [], []
    for r in range(logits.shape[0]):
        row, row_margin = oracle_row(
            logits[r].numpy(),
            value("temperature", r),
            value("top_k", r),
            value("top_p", r),
            value("min_p", r),
        )
        rows.append(row)
        margins.append(row_margin)
    return torch.from_numpy(np.stack(rows)), torch.tensor(margins)


def apply(logits: torch.Tensor, params: Params, backend: Backend) -> torch.Tensor:
    """A masked copy of ``logits``."""
    out = logits.clone()
    apply_sampling_mask(
        out,
        temperature=params.get("temperature"),
        top_k=params.get("top_k"),
        top_p=params.get("top_p"),
        min_p=params.get("min_p"),
        backend=backend,
    )
    return out


CASES = [
    {"top_k": 1},
    {"top_k": 40},
    {"top_p": 0.0},
    {"top_p": 0.3},
    {"top_p": 0.9},
    {"min_p": 0.05},
    {"min_p": 1.0},
    {"temperature": 0.7, "top_k": 50, "top_p": 0.95},
    {"temperature": 1.5, "top_p": 0.8, "min_p": 0.02},
    {"temperature": 0.3, "top_k": 500, "top_p": 0.5, "min_p": 0.1},
]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("vocab", [3, 33, 1000, 32000])
@pytest.mark.parametrize("case", CASES, ids=repr)
def test_matches_oracle(backend: Backend, vocab: int, case: dict[str, float]) -> None:
    gen = torch.Generator().manual_seed(vocab)
    rows = 4
    logits = torch.randn(rows, vocab, generator=gen) * torch.tensor([[0.3], [1.0], [3.0], [8.0]])
    logits[torch.rand(rows, vocab, generator=gen) < 0.1] = -math.inf
    params: Params = {
        name: torch.full((rows,), value, dtype=torch.int32 if name == "top_k" else torch.float32)
        for name, value in case.items()
    }
    expected, margins = oracle(logits, params)
    clear = margins > CUT_OFF_MARGIN  # near-uniform rows of a large vocabulary have dense cut-offs
    assert clear.any(), "every row of this case sits on a cut-off; pick another seed"
    assert torch.equal(apply(logits, params, backend)[clear], expected[clear])


@pytest.mark.parametrize("backend", BACKENDS)
def test_ties_at_the_cut_off_are_kept(backend: Backend) -> None:
    # probabilities ~ [0.687, 0.093, 0.093, 0.093, 0.034]: the 2nd largest value is tied three times
    logits = torch.tensor([[3.0, 1.0, 1.0, 1.0, 0.0]])
    expected = [[True, True, True, True, False]]
    top_k = apply(logits, {"top_k": torch.tensor([2], dtype=torch.int32)}, backend)
    assert torch.isfinite(top_k).tolist() == expected
    top_p = apply(logits, {"top_p": torch.tensor([0.75])}, backend)  # crosses 0.75 at the first 1.0
    assert torch.isfinite(top_p).tolist() == expected


@settings(max_examples=200, deadline=None)
@given(data=st.data(), vocab=st.integers(1, 60))
def test_property_oracle_agrees_away_from_cut_offs(data: st.DataObject, vocab: int) -> None:
    value = st.sampled_from([-math.inf, 0.0, 1.0, -2.0]) | st.floats(-30, 30, width=32)
    logits = torch.tensor(data.draw(st.lists(value, min_size=vocab, max_size=vocab))).view(1, vocab)
    unit = st.sampled_from([0.0, 1.0]) | st.floats(0, 1, width=32)
    maybe = {
        "temperature": st.floats(0.125, 4, width=32),
        "top_k": st.integers(-1, vocab + 1),
        "top_p": unit,
        "min_p": unit,
    }
    params: Params = {}
    for name, strategy in maybe.items():
        drawn = data.draw(st.none() | strategy)
        params[name] = (
            None if drawn is None else torch.tensor([drawn], dtype=torch.int32 if name == "top_k" else None)
        )
    expected, margins = oracle(logits, params)
    assume(bool(margins[0] > CUT_OFF_MARGIN))
    for backend in BACKENDS:
        assert torch.equal(apply(logits, params, backend), expected)
