"""KeptTokens: the mask records exactly the tokens each row kept, the Gumbel kernel that looks only
at them chooses what a scan of the whole row chooses, and the prepared objects (SamplingParams,
GumbelStreams) behave as the functions they stand for."""

from __future__ import annotations

import math

import pytest
import torch

import pyagent_kernels
from pyagent_kernels import Backend, KernelArgumentError
from pyagent_kernels.gumbel import GumbelStreams, gumbel_sample
from pyagent_kernels.sampling import KeptTokens, SamplingParams, apply_sampling_mask

COMPILED = bool(pyagent_kernels.status()["compiled"])
BACKENDS: list[Backend] = ["c", "torch"] if COMPILED else ["torch"]
needs_c = pytest.mark.skipif(not COMPILED, reason="pyagent_kernels._C is not built")


def batch(rows: int = 6, vocab: int = 3000, seed: int = 0) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Logits with -inf entries and per-row parameters mixing every step and none."""
    gen = torch.Generator().manual_seed(seed)
    logits = torch.randn(rows, vocab, generator=gen) * 3
    logits[torch.rand(rows, vocab, generator=gen) < 0.2] = -math.inf
    logits[rows - 1] = -math.inf  # nothing to keep
    params = {
        "top_k": torch.tensor([50, 0, 7, 0, 3000, 5][:rows], dtype=torch.int32),
        "top_p": torch.tensor([0.9, 0.5, 1.0, 1.0, 1.0, 0.3][:rows]),
        "min_p": torch.tensor([0.05, 0.0, 0.0, 0.0, 0.1, 0.0][:rows]),
        "temperature": torch.tensor([0.8, 1.3, 0.0, 1.0, 2.0, 0.5][:rows]),
    }
    return logits, params


def finite_ids(row: torch.Tensor) -> list[int]:
    return (row > -math.inf).nonzero().flatten().tolist()


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("capacity", [0, 5, 60, 4096])
def test_recorded_rows_list_exactly_their_finite_logits(backend: Backend, capacity: int) -> None:
    logits, params = batch()
    kept = KeptTokens(capacity)
    apply_sampling_mask(logits, temperature_last=True, kept=kept, backend=backend, **params)
    recorded = 0
    for row in range(logits.shape[0]):
        tokens = kept.tokens(row)
        if tokens is not None:
            assert tokens == finite_ids(logits[row])
            assert torch.equal(kept.values[row, : len(tokens)], logits[row, tokens])
            recorded += 1
        else:
            assert capacity < len(finite_ids(logits[row])) or backend == "c"  # C may skip unmasked rows
    assert kept.tokens(logits.shape[0] - 1) == []  # the all -inf row: nothing kept
    if capacity >= 60:
        assert kept.tokens(0) is not None  # top-k rows always fit then
    assert recorded >= 1


@needs_c
def test_rows_without_top_k_are_recorded_when_masked() -> None:
    logits, params = batch()
    kept = KeptTokens()
    apply_sampling_mask(logits, kept=kept, backend="c", **params)
    assert kept.tokens(1) == finite_ids(logits[1])  # top-p 0.5 alone
    assert kept.tokens(3) is None  # nothing masked or scaled: the row was left as it was


def test_record_follows_the_tensor() -> None:
    logits, params = batch()
    kept = KeptTokens()
    apply_sampling_mask(logits, kept=kept, **params)
    assert kept.matches(logits)
    assert not kept.matches(logits.clone())
    logits[0, 0] = -math.inf  # any in-place torch op voids the record
    assert not kept.matches(logits)
    kept.clear()
    assert not kept.matches(logits)


def test_bad_capacity() -> None:
    with pytest.raises(KernelArgumentError, match="capacity=-1"):
        KeptTokens(-1)


@pytest.mark.parametrize("backend", BACKENDS)
def test_gumbel_over_kept_tokens_equals_a_full_scan(backend: Backend) -> None:
    for seed in range(5):
        logits, params = batch(seed=seed)
        logits = logits[:-1].contiguous()  # every row selectable
        kept = KeptTokens(40)  # some rows overflow and get scanned
        apply_sampling_mask(logits, kept=kept, backend=backend, **{k: v[:-1] for k, v in params.items()})
        seeds = torch.arange(5, dtype=torch.int64) * 977 + seed
        steps = torch.full((5,), seed, dtype=torch.int64)
        with_kept = gumbel_sample(logits, seeds, steps, kept=kept, backend=backend)
        scanned = gumbel_sample(logits, seeds, steps, backend=backend)
        by_torch = gumbel_sample(logits, seeds, steps, backend="torch")
        assert torch.equal(with_kept, scanned) and torch.equal(with_kept, by_torch)


@needs_c
def test_stale_record_is_not_used() -> None:
    logits = torch.randn(1, 1000, generator=torch.Generator().manual_seed(4))
    kept = KeptTokens()
    apply_sampling_mask(logits, top_k=torch.tensor([3], dtype=torch.int32), kept=kept)
    logits[0, 999] = 100.0  # unmasks a token the record does not list
    seeds, steps = torch.zeros(1, dtype=torch.int64), torch.zeros(1, dtype=torch.int64)
    assert int(gumbel_sample(logits, seeds, steps, kept=kept, backend="c")[0]) == 999


@needs_c
def test_kept_token_outside_the_vocabulary_is_an_error() -> None:
    logits = torch.randn(2, 100)
    kept = KeptTokens(4)
    apply_sampling_mask(logits, top_k=torch.tensor([2, 2], dtype=torch.int32), kept=kept)
    kept.index[1, 0] = 100  # corrupt the record (its owner check still passes)
    zeros = torch.zeros(2, dtype=torch.int64)
    with pytest.raises(KernelArgumentError, match="row 1 name a token outside"):
        gumbel_sample(logits, zeros, zeros, kept=kept, backend="c")


@pytest.mark.parametrize("backend", BACKENDS)
def test_streams_advance_and_match_the_function(backend: Backend) -> None:
    logits = torch.randn(3, 400, generator=torch.Generator().manual_seed(9))
    seeds = torch.tensor([1, -5, 2**62], dtype=torch.int64)
    streams = GumbelStreams(seeds.clone(), torch.zeros(3, dtype=torch.int64))
    for step in range(4):
        want = gumbel_sample(logits, seeds, torch.full((3,), step, dtype=torch.int64), backend=backend)
        assert torch.equal(streams.sample(logits, backend=backend), want)
    assert streams.steps.tolist() == [4, 4, 4]


def test_streams_check_their_tensors() -> None:
    with pytest.raises(KernelArgumentError, match="steps has shape"):
        GumbelStreams(torch.zeros(3, dtype=torch.int64), torch.zeros(2, dtype=torch.int64))
    streams = GumbelStreams(torch.zeros(2, dtype=torch.int64), torch.zeros(2, dtype=torch.int64))
    with pytest.raises(KernelArgumentError, match="logits has shape"):
        streams.sample(torch.zeros(3, 10))


@pytest.mark.parametrize("backend", BACKENDS)
def test_params_from_lists_equal_the_function(backend: Backend) -> None:
    logits, params = batch()
    want = logits.clone()
    apply_sampling_mask(want, temperature_last=True, backend=backend, **params)
    prepared = SamplingParams(temperature_last=True, **{k: v.tolist() for k, v in params.items()})
    got = logits.clone()
    prepared.apply(got, backend=backend)
    assert torch.equal(got.view(torch.int32), want.view(torch.int32))


def test_params_check_their_rows() -> None:
    with pytest.raises(KernelArgumentError, match="top_p has shape"):
        SamplingParams(top_k=[1, 2], top_p=[0.5])
    with pytest.raises(KernelArgumentError, match="temperature has dtype"):
        SamplingParams(temperature=torch.ones(2, dtype=torch.float64))
    prepared = SamplingParams(top_k=[1, 2**40])  # clamped to int32
    assert prepared.tensors["top_k"].tolist() == [1, 2**31 - 1]  # type: ignore[union-attr]
    with pytest.raises(KernelArgumentError, match="logits has shape"):
        prepared.apply(torch.zeros(3, 10))
    with pytest.raises(KernelArgumentError, match=r"top_p\[0\] = 1.5"):
        SamplingParams(top_p=[1.5]).apply(torch.zeros(1, 10))
