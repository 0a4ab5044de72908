"""mixers: the short convolution, the selective scan, the gated delta rule and absorbed latent attention,
C on every ISA variant (the same bits on each) and the torch fallbacks against float64 oracles written
from the recurrences of ``include/pyagent/mixers.h``; the convolution bit for bit between C and the
fallback; a sequence's bits alone and batched; the state slots of other sequences untouched; bad
arguments refused before anything is written."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import pyagent_kernels
from pyagent_kernels import Backend, KernelArgumentError
from pyagent_kernels.mixers import MixerBatch

COMPILED = bool(pyagent_kernels.status()["compiled"])
needs_c = pytest.mark.skipif(not COMPILED, reason="pyagent_kernels._C is not built")
BACKENDS: list[Backend] = ["c", "torch"] if COMPILED else ["torch"]

#: Three sequences: one fresh prefill, one decode step after 9 tokens, one chunk of 4 after 2.
STARTS, LENS, SLOTS = [0, 6, 7, 11], [6, 10, 6], [4, 0, 2]
NUM_SLOTS = 5


def batch(**extra: torch.Tensor) -> MixerBatch:
    return MixerBatch(query_start_loc=torch.tensor(STARTS, dtype=torch.int32),
                      seq_lens=torch.tensor(LENS, dtype=torch.int32),
                      state_slots=torch.tensor(SLOTS, dtype=torch.int64), **extra)


def sequences() -> list[tuple[int, int, int, bool]]:
    """``(lo, hi, slot, fresh)`` of each sequence."""
    return [(STARTS[s], STARTS[s + 1], SLOTS[s], LENS[s] == STARTS[s + 1] - STARTS[s]) for s in range(len(SLOTS))]


def conv_oracle(x: np.ndarray, w: np.ndarray, b: np.ndarray, state: np.ndarray, silu: bool) -> tuple[np.ndarray, ...]:
    out, state = np.zeros_like(x, dtype=np.float64), state.astype(np.float64).copy()
    for lo, hi, slot, fresh in sequences():
        window = np.zeros_like(state[slot]) if fresh else state[slot]
        for t in range(lo, hi):
            window = np.concatenate((window, x[t][:, None]), axis=1)
            v = (w * window).sum(1) + b
            out[t] = v / (1 + np.exp(-v)) if silu else v
            window = window[:, 1:]
        state[slot] = window
    return out, state


def ssd_oracle(x, dt, A, B, C, D, dt_bias, state):
    y, state = np.zeros_like(x, dtype=np.float64), state.astype(np.float64).copy()
    heads, groups = x.shape[1], B.shape[1]
    for lo, hi, slot, fresh in sequences():
        S = np.zeros_like(state[slot]) if fresh else state[slot]
        for t in range(lo, hi):
            for h in range(heads):
                g = h // (heads // groups)
                raw = dt[t, h] + dt_bias[h]
                delta = raw if raw > 20 else math.log1p(math.exp(raw))
                S[h] = math.exp(delta * A[h]) * S[h] + delta * np.outer(x[t, h], B[t, g])
                y[t, h] = S[h] @ C[t, g] + D[h] * x[t, h]
        state[slot] = S
    return y, state


def delta_oracle(q, k, v, g, beta, state, scale):
    o, state = np.zeros_like(v, dtype=np.float64), state.astype(np.float64).copy()
    value_heads, key_heads = v.shape[1], q.shape[1]
    for lo, hi, slot, fresh in sequences():
        S = np.zeros_like(state[slot]) if fresh else state[slot]
        for t in range(lo, hi):
            for h in range(value_heads):
                kh = h // (value_heads // key_heads)
                S[h] = math.exp(g[t, h]) * S[h]
                S[h] = S[h] + np.outer(k[t, kh], beta[t, h] * (v[t, h] - S[h].T @ k[t, kh]))
                o[t, h] = scale * (S[h].T @ q[t, kh])
        state[slot] = S
    return o, state


def inputs(family: str, seed: int = 0) -> tuple[torch.Tensor, ...]:
    gen = torch.Generator().manual_seed(seed)
    tokens = STARTS[-1]

    def randn(*size: int, scale: float = 1.0) -> torch.Tensor:
        return scale * torch.randn(*size, generator=gen)

    if family == "conv":
        return randn(tokens, 40), randn(40, 4, scale=0.5), randn(40, scale=0.1), randn(NUM_SLOTS, 40, 3)
    if family == "ssd":
        return (randn(tokens, 4, 8), randn(tokens, 4), -torch.rand(4, generator=gen) - 0.1,
                randn(tokens, 2, 20, scale=0.3), randn(tokens, 2, 20, scale=0.3), randn(4), randn(4, scale=0.5),
                randn(NUM_SLOTS, 4, 8, 20))
    q = F.normalize(randn(tokens, 2, 24), dim=-1)
    k = F.normalize(randn(tokens, 2, 24), dim=-1)
    return (q, k, randn(tokens, 4, 17), -F.softplus(randn(tokens, 4)), torch.rand(tokens, 4, generator=gen),
            randn(NUM_SLOTS, 4, 24, 17))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("silu", [False, True])
def test_short_conv_is_the_oracle(backend: Backend, silu: bool) -> None:
    x, w, b, state = inputs("conv")
    out, after = conv_oracle(x.numpy(), w.numpy(), b.numpy(), state.numpy(), silu)
    ours_state = state.clone()
    ours = batch().short_conv(x, w, b, ours_state, activation="silu" if silu else None, backend=backend)
    np.testing.assert_allclose(ours.numpy(), out, atol=1e-5, rtol=1e-5)
    np.testing.assert_allclose(ours_state.numpy(), after, atol=0, rtol=0)
    assert torch.equal(ours_state[[1, 3]], state[[1, 3]]), "slots outside the batch changed"


@needs_c
def test_short_conv_is_the_fallback_bit_for_bit(c_isa: str) -> None:
    x, w, b, state = inputs("conv", 1)
    states = state.clone(), state.clone()
    ours = batch().short_conv(x, w, b, states[0], backend="c")
    theirs = batch().short_conv(x, w, b, states[1], backend="torch")
    assert torch.equal(ours, theirs) and torch.equal(*states)


@pytest.mark.parametrize("backend", BACKENDS)
def test_ssd_is_the_oracle(backend: Backend) -> None:
    x, dt, A, B, C, D, dt_bias, state = inputs("ssd")
    y, after = ssd_oracle(*(t.double().numpy() for t in (x, dt, A, B, C, D, dt_bias, state)))
    ours_state = state.clone()
    ours = batch().ssd(x, dt, A, B, C, D, dt_bias, ours_state, backend=backend)
    np.testing.assert_allclose(ours.numpy(), y, atol=1e-4, rtol=1e-4)
    np.testing.assert_allclose(ours_state.numpy(), after, atol=1e-4, rtol=1e-4)
    assert torch.equal(ours_state[[1, 3]], state[[1, 3]])


@pytest.mark.parametrize("backend", BACKENDS)
def test_gated_delta_is_the_oracle(backend: Backend) -> None:
    q, k, v, g, beta, state = inputs("delta")
    o, after = delta_oracle(*(t.double().numpy() for t in (q, k, v, g, beta, state)), 24**-0.5)
    ours_state = state.clone()
    ours = batch().gated_delta(q, k, v, g, beta, ours_state, scale=24**-0.5, backend=backend)
    np.testing.assert_allclose(ours.numpy(), o, atol=1e-4, rtol=1e-4)
    np.testing.assert_allclose(ours_state.numpy(), after, atol=1e-4, rtol=1e-4)
    assert torch.equal(ours_state[[1, 3]], state[[1, 3]])


def mla_case(seed: int = 0) -> tuple[MixerBatch, tuple[torch.Tensor, ...]]:
    """Blocks of 4 scattered among 12; the new rows' slots in their sequences' blocks."""
    gen = torch.Generator().manual_seed(seed)
    tables = torch.tensor([[5, 1, 0], [2, 7, 9], [11, 3, 0]], dtype=torch.int32)
    slots = [int(tables[s, p // 4]) * 4 + p % 4 for s in range(3)
             for p in range(LENS[s] - (STARTS[s + 1] - STARTS[s]), LENS[s])]
    tokens = STARTS[-1]
    tensors = (torch.randn(tokens, 3, 8, generator=gen), torch.randn(tokens, 3, 4, generator=gen),
               torch.randn(tokens, 20, generator=gen), torch.randn(tokens, 4, generator=gen),
               0.3 * torch.randn(3, 8, 20, generator=gen), 0.3 * torch.randn(3, 6, 20, generator=gen),
               torch.randn(12, 4, 24, generator=gen))
    return batch(block_tables=tables, slot_mapping=torch.tensor(slots, dtype=torch.int64)), tensors


def mla_oracle(layout: MixerBatch, q_nope, q_pe, latent, k_pe, w_uk, w_uv, cache, scale):
    """Without absorption, in float64: every cached latent expanded into each head's key and value."""
    rows = cache.double().reshape(-1, 24).clone()
    rows[layout.slot_mapping] = torch.cat((latent, k_pe), 1).double()
    out = torch.zeros(q_nope.shape[0], 3, 6, dtype=torch.float64)
    for s, (lo, hi, _, _) in enumerate(sequences()):
        positions = torch.arange(LENS[s])
        cached = rows[layout.block_tables[s].long()[positions // 4] * 4 + positions % 4]
        keys = torch.einsum("hnl,jl->hjn", w_uk.double(), cached[:, :20])
        values = torch.einsum("hvl,jl->hjv", w_uv.double(), cached[:, :20])
        for t in range(lo, hi):
            pos = LENS[s] - (hi - t)
            scores = (torch.einsum("hn,hjn->hj", q_nope[t].double(), keys) + q_pe[t].double() @ cached[:, 20:].T)
            weights = (scores[:, : pos + 1] * scale).softmax(-1)
            out[t] = torch.einsum("hj,hjv->hv", weights, values[:, : pos + 1])
    return out, rows.reshape(cache.shape)


@pytest.mark.parametrize("backend", BACKENDS)
def test_latent_attention_is_the_oracle(backend: Backend) -> None:
    layout, (q_nope, q_pe, latent, k_pe, w_uk, w_uv, cache) = mla_case()
    expected, expected_cache = mla_oracle(layout, q_nope, q_pe, latent, k_pe, w_uk, w_uv, cache, 0.25)
    ours_cache = cache.clone()
    ours = layout.mla(q_nope, q_pe, latent, k_pe, w_uk, w_uv, ours_cache, scale=0.25, backend=backend)
    np.testing.assert_allclose(ours.numpy(), expected.numpy(), atol=1e-4, rtol=1e-4)
    assert torch.equal(ours_cache, expected_cache.float()), "the cache must change at the new rows only"


@needs_c
def test_every_isa_variant_gives_the_same_bits() -> None:
    results = []
    for isa in pyagent_kernels.status()["isa_supported"]:
        with pyagent_kernels.using_isa(isa):
            x, dt, A, B, C, D, dt_bias, state = inputs("ssd", 2)
            q, k, v, g, beta, delta_state = inputs("delta", 3)
            layout, mla = mla_case(4)
            results.append((batch().ssd(x, dt, A, B, C, D, dt_bias, state, backend="c"), state,
                            batch().gated_delta(q, k, v, g, beta, delta_state, scale=0.2, backend="c"), delta_state,
                            layout.mla(*mla, scale=0.3, backend="c", threads=2)))
    for other in results[1:]:
        assert all(torch.equal(a, b) for a, b in zip(results[0], other, strict=True))


@needs_c
def test_a_sequence_gives_the_same_bits_alone_and_batched_and_on_threads() -> None:
    x, dt, A, B, C, D, dt_bias, state = inputs("ssd", 5)
    whole = state.clone()
    batched = batch().ssd(x, dt, A, B, C, D, dt_bias, whole, backend="c", threads=3)
    lo, hi = STARTS[2], STARTS[3]
    alone_state = state.clone()
    alone = MixerBatch(query_start_loc=torch.tensor([0, hi - lo], dtype=torch.int32),
                       seq_lens=torch.tensor([LENS[2]], dtype=torch.int32),
                       state_slots=torch.tensor([SLOTS[2]])).ssd(x[lo:hi], dt[lo:hi], A, B[lo:hi], C[lo:hi], D,
                                                                  dt_bias, alone_state, backend="c")
    assert torch.equal(alone, batched[lo:hi]) and torch.equal(alone_state[SLOTS[2]], whole[SLOTS[2]])


@pytest.mark.parametrize("backend", BACKENDS)
def test_bad_arguments_are_refused_before_anything_is_written(backend: Backend) -> None:
    x, w, b, state = inputs("conv")
    before = state.clone()
    layout_of = {"query_start_loc": torch.tensor(STARTS, dtype=torch.int32),
                 "seq_lens": torch.tensor(LENS, dtype=torch.int32)}
    cases = {
        "x in float64": (lambda: batch().short_conv(x.double(), w, b, state, backend=backend), "x has dtype"),
        "a weight one value wide": (lambda: batch().short_conv(x, w[:, :1].contiguous(), b, state, backend=backend),
                                    "width of at least 2"),
        "a slot past the state": (lambda: MixerBatch(**layout_of, state_slots=torch.tensor([4, 0, 5])).short_conv(
            x, w, b, state, backend=backend), r"state_slots\[2\] = 5"),
        "one slot twice": (lambda: MixerBatch(**layout_of, state_slots=torch.tensor([4, 0, 4])).short_conv(
            x, w, b, state, backend=backend), "used by an earlier"),
        "a sequence shorter than its new tokens": (lambda: MixerBatch(
            query_start_loc=layout_of["query_start_loc"], seq_lens=torch.tensor([6, 10, 3], dtype=torch.int32),
            state_slots=torch.tensor(SLOTS)).short_conv(x, w, b, state, backend=backend),
            "sequence 2 has 4 new tokens"),
        "no state slots": (lambda: MixerBatch(**layout_of).short_conv(x, w, b, state, backend=backend),
                           "needs state_slots"),
        "an unknown activation": (lambda: batch().short_conv(x, w, b, state, activation="gelu", backend=backend),
                                  "activation='gelu'"),
    }
    for what, (call, message) in cases.items():
        with pytest.raises(KernelArgumentError, match=message):
            call()
        assert torch.equal(state, before), f"{what}: the state changed"
    layout, (q_nope, q_pe, latent, k_pe, w_uk, w_uv, cache) = mla_case()
    cache_before = cache.clone()
    bad = MixerBatch(query_start_loc=torch.tensor(STARTS, dtype=torch.int32),
                     seq_lens=torch.tensor(LENS, dtype=torch.int32),
                     block_tables=torch.tensor([[5, 1, 0], [2, 7, 99], [11, 3, 0]], dtype=torch.int32),
                     slot_mapping=layout.slot_mapping)
    with pytest.raises(KernelArgumentError, match="sequence 1 of length 10 needs 3 valid block ids"):
        bad.mla(q_nope, q_pe, latent, k_pe, w_uk, w_uv, cache, scale=0.25, backend=backend)
    assert torch.equal(cache, cache_before)
