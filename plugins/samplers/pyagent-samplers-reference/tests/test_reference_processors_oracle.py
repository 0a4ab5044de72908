"""Temperature, top-k and top-p against brute-force numpy oracles (a full sort per row)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from pyagent_core.interfaces.sampler import AddedRequest, BatchUpdate, LogitsProcessor, SamplerContext
from pyagent_samplers_reference.temperature import TemperatureProcessor
from pyagent_samplers_reference.top_k import TopKProcessor
from pyagent_samplers_reference.top_p import TopPProcessor

NEG_INF = float("-inf")
# Cumulative masses closer than this to top_p are decided by float32 rounding; the oracle accepts
# either outcome for the token there (the implementation sums float32 probabilities).
TOP_P_TOLERANCE = 1e-5


# --- oracles -------------------------------------------------------------------------------------


def descending_order(row: np.ndarray) -> list[int]:
    """Token ids from the largest logit to the smallest; equal logits by increasing id."""
    return sorted(range(row.size), key=lambda i: (-row[i], i))


def softmax64(row: np.ndarray) -> np.ndarray:
    """Softmax in float64."""
    shifted = np.exp(row.astype(np.float64) - np.max(row))
    return shifted / shifted.sum()


def oracle_temperature(row: np.ndarray, temperature: float) -> np.ndarray:
    """``row / temperature``, or the row itself for temperatures 0 and 1."""
    return row.copy() if temperature in (0, 1) else row.astype(np.float64) / temperature


def oracle_top_k(row: np.ndarray, k: int) -> np.ndarray:
    """Keep the logits that are at least the k-th largest; ``k=0`` keeps everything."""
    if k == 0:
        return row.copy()
    kth = row[descending_order(row)[min(k, row.size) - 1]]
    return np.where(row < kth, NEG_INF, row)


def oracle_top_p(row: np.ndarray, p: float) -> tuple[np.ndarray, np.ndarray]:
    """Walk the tokens from most to least probable, keeping each while the mass before it is < p.

    Returns the expected row and a mask of tokens whose fate rounding decides (the mass before
    them is within :data:`TOP_P_TOLERANCE` of ``p``); the most probable token is always kept.
    """
    out = row.copy()
    ambiguous = np.zeros(row.size, dtype=bool)
    if p >= 1:
        return out, ambiguous
    probs = softmax64(row)
    mass_before = 0.0
    for position, token in enumerate(descending_order(row)):
        if position > 0:
            ambiguous[token] = abs(mass_before - p) < TOP_P_TOLERANCE
            if mass_before >= p:
                out[token] = NEG_INF
        mass_before += probs[token]
    return out, ambiguous


# --- running a processor -------------------------------------------------------------------------


def run(processor_type: type[LogitsProcessor], name: str, rows: np.ndarray,
        values: Sequence[Any], options: Mapping[str, Any] | None = None) -> np.ndarray:
    """Apply a processor to ``rows`` (float32), row ``i`` with the request parameter ``values[i]``."""
    processor = processor_type(options or {}, SamplerContext(rows.shape[1]))
    added = tuple(AddedRequest(index=i, params={name: v}) for i, v in enumerate(values))
    processor.update_state(BatchUpdate(batch_size=len(values), added=added))
    return processor.apply(torch.from_numpy(rows.astype(np.float32))).numpy()


def random_rows(seed: int, num_rows: int, vocab_size: int) -> np.ndarray:
    """Random float32 logits: normal rows, rows of small integers (ties), rows with ``-inf``."""
    rng = np.random.default_rng(seed)
    rows = rng.normal(0, 3, (num_rows, vocab_size)).astype(np.float32)
    rows[1::3] = rng.integers(-2, 3, (len(rows[1::3]), vocab_size))
    masked = rng.random((num_rows, vocab_size)) < 0.3
    masked[:, 0] = False
    rows[2::3][masked[2::3]] = NEG_INF
    return rows


# --- hypothesis strategies -----------------------------------------------------------------------

logit = st.one_of(
    st.floats(-30, 30, width=32),
    st.integers(-2, 2).map(float),  # few distinct values: many ties
    st.just(NEG_INF),
)


@st.composite
def logit_rows(draw: st.DrawFn, max_rows: int = 6, max_vocab: int = 40) -> np.ndarray:
    """A ``[rows, vocab]`` float32 array whose rows each hold at least one finite logit."""
    num_rows = draw(st.integers(1, max_rows))
    vocab_size = draw(st.integers(1, max_vocab))
    rows = np.array(
        [draw(st.lists(logit, min_size=vocab_size, max_size=vocab_size)) for _ in range(num_rows)],
        dtype=np.float32,
    )
    for row in rows:
        if not np.isfinite(row).any():
            row[draw(st.integers(0, vocab_size - 1))] = draw(st.floats(-30, 30, width=32))
    return rows


PROPERTY_SETTINGS = settings(max_examples=300, deadline=None)


# --- temperature ---------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(5))
def test_temperature_matches_oracle(seed: int) -> None:
    rows = random_rows(seed, 12, 50)
    temperatures = [0, 1, 1.0, 0.5, 2.0, 1e-3, 7, 0.9, 1.1, 3, 0.25, 100.0]
    out = run(TemperatureProcessor, "temperature", rows, temperatures)
    for row, t, got in zip(rows, temperatures, out, strict=True):
        np.testing.assert_allclose(got, oracle_temperature(row, t), rtol=1e-6)


@PROPERTY_SETTINGS
@given(rows=logit_rows(), data=st.data())
def test_temperature_property(rows: np.ndarray, data: st.DataObject) -> None:
    temps = data.draw(st.lists(st.sampled_from([0, 1]) | st.floats(1e-2, 100), min_size=len(rows),
                               max_size=len(rows)))
    out = run(TemperatureProcessor, "temperature", rows, temps)
    for row, t, got in zip(rows, temps, out, strict=True):
        # atol: a subnormal logit divided by t may round to 0 in float32
        np.testing.assert_allclose(got, oracle_temperature(row, t), rtol=1e-6, atol=1e-38)
        if t in (0, 1):
            assert np.array_equal(got, row)
        assert got[np.argmax(row)] == got.max(), "the largest logit stays the largest"


def test_temperature_option_applies_to_requests_without_one() -> None:
    rows = random_rows(0, 2, 10)
    out = run(TemperatureProcessor, "temperature", rows, [None, 4.0], options={"temperature": 2.0})
    np.testing.assert_allclose(out, rows / np.array([[2.0], [4.0]]), rtol=1e-6)


# --- top-k ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(5))
def test_top_k_matches_oracle(seed: int) -> None:
    rows = random_rows(seed, 12, 50)
    ks = [0, 1, 2, 5, 10, 49, 50, 51, 1000, 3, 7, 25]  # includes k > vocab and k = 0 (off)
    out = run(TopKProcessor, "top_k", rows, ks)
    for row, k, got in zip(rows, ks, out, strict=True):
        np.testing.assert_array_equal(got, oracle_top_k(row, k))


def test_top_k_keeps_ties_with_the_kth_value() -> None:
    row = np.array([[1.0, 3.0, 2.0, 2.0, 2.0, 0.0]], dtype=np.float32)
    out = run(TopKProcessor, "top_k", row, [2])
    np.testing.assert_array_equal(out[0], [NEG_INF, 3.0, 2.0, 2.0, 2.0, NEG_INF])


@PROPERTY_SETTINGS
@given(rows=logit_rows(), data=st.data())
def test_top_k_property(rows: np.ndarray, data: st.DataObject) -> None:
    vocab_size = rows.shape[1]
    ks = data.draw(st.lists(st.integers(0, vocab_size + 3), min_size=len(rows), max_size=len(rows)))
    out = run(TopKProcessor, "top_k", rows, ks)
    for row, k, got in zip(rows, ks, out, strict=True):
        np.testing.assert_array_equal(got, oracle_top_k(row, k))
        kept = np.isfinite(got).sum()
        assert kept >= min(k if k else vocab_size, np.isfinite(row).sum())
        assert np.argmax(got) == np.argmax(row)


# --- top-p ---------------------------------------------------------------------------------------


def assert_top_p_matches(row: np.ndarray, p: float, got: np.ndarray) -> None:
    """``got`` equals the oracle's row, except where rounding may decide either way."""
    expected, ambiguous = oracle_top_p(row, p)
    decided = ~ambiguous
    np.testing.assert_array_equal(got[decided], expected[decided], err_msg=f"top_p={p}")
    assert np.all((got[ambiguous] == row[ambiguous]) | (got[ambiguous] == NEG_INF))


@pytest.mark.parametrize("seed", range(5))
def test_top_p_matches_oracle(seed: int) -> None:
    rows = random_rows(seed, 12, 50)
    ps = [0.0, 1.0, 0.1, 0.5, 0.9, 0.99, 0.999, 0.3, 0.7, 1e-6, 0.95, 0.6]  # includes p = 0 and 1
    out = run(TopPProcessor, "top_p", rows, ps)
    for row, p, got in zip(rows, ps, out, strict=True):
        assert_top_p_matches(row, p, got)


@pytest.mark.parametrize(("p", "kept"), [(0.0, 1), (0.4, 1), (0.6, 2), (0.8, 3), (0.9, 4)])
def test_top_p_on_exact_probabilities(p: float, kept: int) -> None:
    probs = np.array([0.125, 0.5, 0.125, 0.25])  # by probability: tokens 1, 3, 0, 2
    out = run(TopPProcessor, "top_p", np.log(probs)[None, :], [p])[0]
    assert set(np.flatnonzero(np.isfinite(out)).tolist()) == set([1, 3, 0, 2][:kept])


@pytest.mark.parametrize(("p", "kept"), [(0.0, [0]), (0.3, [0, 1]), (0.5, [0, 1]), (0.55, [0, 1, 2])])
def test_top_p_breaks_ties_by_lower_id(p: float, kept: list[int]) -> None:
    out = run(TopPProcessor, "top_p", np.zeros((1, 4), dtype=np.float32), [p])[0]
    assert np.flatnonzero(np.isfinite(out)).tolist() == kept


def test_top_p_one_leaves_underflowing_tokens() -> None:
    row = np.array([[0.0, -200.0, NEG_INF]], dtype=np.float32)  # softmax of -200 underflows to 0
    out = run(TopPProcessor, "top_p", row, [1.0])
    np.testing.assert_array_equal(out, row)


@PROPERTY_SETTINGS
@given(rows=logit_rows(), data=st.data())
def test_top_p_property(rows: np.ndarray, data: st.DataObject) -> None:
    ps = data.draw(st.lists(st.sampled_from([0.0, 1.0]) | st.floats(0, 1), min_size=len(rows),
                            max_size=len(rows)))
    out = run(TopPProcessor, "top_p", rows, ps)
    for row, p, got in zip(rows, ps, out, strict=True):
        assert_top_p_matches(row, p, got)
        kept = np.isfinite(got)
        order = descending_order(row)
        prefix = int(kept[order].sum())
        assert kept[order][:prefix].all(), "the kept tokens are the most probable ones"
        assert prefix >= 1 and np.argmax(got) == np.argmax(row)
        if p < 1:
            mass = softmax64(row)[kept].sum()
            smaller = mass - softmax64(row)[order[prefix - 1]]
            assert mass >= p - TOP_P_TOLERANCE or math.isclose(mass, 1.0)
            assert prefix == 1 or smaller < p + TOP_P_TOLERANCE, "the kept set is the smallest one"
