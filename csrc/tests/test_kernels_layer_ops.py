"""layer_ops: rope_split against a numpy oracle (bit for bit), add_rms_norm and silu_mul against
float64 references, the torch fallbacks, every ISA variant giving the same bits, and bad arguments."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import pyagent_kernels
from pyagent_kernels import Backend, KernelArgumentError, run_prepared
from pyagent_kernels.layer_ops import (
    add_rms_norm,
    prepare_add_rms_norm,
    prepare_rope_split,
    prepare_silu_mul,
    rope_split,
    silu_mul,
)
from pyagent_kernels.profile import count_kernels

COMPILED = bool(pyagent_kernels.status()["compiled"])
needs_c = pytest.mark.skipif(not COMPILED, reason="pyagent_kernels._C is not built")
DTYPES = [torch.float32, torch.bfloat16]
BACKENDS: list[Backend] = ["c", "torch"] if COMPILED else ["torch"]


def rope_oracle(qkv: np.ndarray, cos: np.ndarray, sin: np.ndarray, heads: int, kv_heads: int, dim: int) -> np.ndarray:
    """float32 numpy: x * cos + rotate_half(x) * sin on every query and key head, each op rounded."""
    tokens = qkv.shape[0]
    qk = qkv[:, : (heads + kv_heads) * dim].reshape(tokens, heads + kv_heads, dim)
    rotated = np.concatenate((-qk[..., dim // 2 :], qk[..., : dim // 2]), axis=-1)
    return (qk * cos[:, None, :]).astype(np.float32) + (rotated * sin[:, None, :]).astype(np.float32)


@needs_c
@pytest.mark.parametrize(("tokens", "heads", "kv_heads", "dim"),
                         [(1, 9, 3, 64), (5, 4, 4, 8), (3, 2, 1, 2), (0, 3, 1, 4)])
def test_rope_split_is_the_oracle_bit_for_bit(c_isa: str, tokens: int, heads: int, kv_heads: int, dim: int) -> None:
    gen = torch.Generator().manual_seed(tokens + dim)
    qkv = torch.randn(tokens, (heads + 2 * kv_heads) * dim, generator=gen)
    cos, sin = torch.randn(tokens, dim, generator=gen), torch.randn(tokens, dim, generator=gen)
    q, k, v = rope_split(qkv, cos, sin, heads, kv_heads, dim, backend="c")
    expected = torch.from_numpy(rope_oracle(qkv.numpy(), cos.numpy(), sin.numpy(), heads, kv_heads, dim))
    assert torch.equal(q, expected[:, :heads]) and torch.equal(k, expected[:, heads:])
    assert torch.equal(v, qkv[:, (heads + kv_heads) * dim :].reshape(tokens, kv_heads, dim))
    for dtype in DTYPES:
        args = (qkv.to(dtype), cos.to(dtype), sin.to(dtype), heads, kv_heads, dim)
        for ours, fallback in zip(rope_split(*args, backend="c"), rope_split(*args, backend="torch"), strict=True):
            assert torch.equal(ours, fallback)


@needs_c
@settings(max_examples=25, deadline=None)
@given(rows=st.integers(1, 5), dim=st.integers(1, 600), with_delta=st.booleans(), dtype=st.sampled_from(DTYPES),
       seed=st.integers(0, 2**16))
def test_add_rms_norm_matches_float64_and_the_fallback(rows: int, dim: int, with_delta: bool, dtype: torch.dtype,
                                                      seed: int) -> None:
    gen = torch.Generator().manual_seed(seed)
    hidden, weight = torch.randn(rows, dim, generator=gen).to(dtype), torch.randn(dim, generator=gen).to(dtype)
    delta = torch.randn(rows, dim, generator=gen).to(dtype) if with_delta else None
    ours_hidden, fallback_hidden = hidden.clone(), hidden.clone()
    ours = add_rms_norm(ours_hidden, weight, 1e-5, delta, backend="c")
    fallback = add_rms_norm(fallback_hidden, weight, 1e-5, delta, backend="torch")
    assert torch.equal(ours_hidden, fallback_hidden)  # the residual add is one rounded add either way
    summed = ours_hidden.double()
    expected = summed / torch.sqrt((summed * summed).mean(-1, keepdim=True) + 1e-5) * weight.double()
    tolerance = 1e-5 if dtype == torch.float32 else 2e-2
    scale = expected.abs() + 1e-3
    assert ((ours.double() - expected).abs() / scale).max() <= tolerance
    assert ((ours.double() - fallback.double()).abs() / scale).max() <= tolerance


@needs_c
@pytest.mark.parametrize("dtype", DTYPES)
def test_silu_mul_matches_float64_and_the_fallback(dtype: torch.dtype) -> None:
    gen = torch.Generator().manual_seed(7)
    edges = torch.tensor([[-100.0, -88.0, 0.0, -0.0, 50.0] * 40] * 3)
    gate = torch.cat((torch.randn(3, 200, generator=gen) * 8, edges), dim=1)
    gate_up = torch.cat((gate, torch.randn(3, 400, generator=gen)), dim=1).to(dtype)
    ours, fallback = silu_mul(gate_up, backend="c"), silu_mul(gate_up, backend="torch")
    g, u = gate_up.double().chunk(2, dim=-1)
    expected = g / (1 + torch.exp(-g)) * u
    tolerance = 1e-6 if dtype == torch.float32 else 1e-2
    scale = expected.abs() + 1e-6
    assert ((ours.double() - expected).abs() / scale).max() <= tolerance
    assert ((ours.double() - fallback.double()).abs() / scale).max() <= tolerance


@needs_c
def test_every_isa_variant_gives_the_same_bits(c_isa: str) -> None:
    """Compared with the best variant's results, computed once with the default selection."""
    gen = torch.Generator().manual_seed(11)
    hidden, weight, delta = torch.randn(4, 333, generator=gen), torch.randn(333, generator=gen), torch.randn(4, 333)
    gate_up = torch.randn(4, 2 * 333, generator=gen) * 5
    pyagent_kernels.set_isa(None)
    best_hidden = hidden.clone()
    expected = (add_rms_norm(best_hidden, weight, 1e-6, delta), silu_mul(gate_up))
    pyagent_kernels.set_isa(c_isa)
    ours_hidden = hidden.clone()
    assert torch.equal(add_rms_norm(ours_hidden, weight, 1e-6, delta), expected[0])
    assert torch.equal(ours_hidden, best_hidden) and torch.equal(silu_mul(gate_up), expected[1])


@needs_c
@pytest.mark.parametrize("dtype", DTYPES)
def test_rows_shared_over_threads_are_each_rows_own(dtype: torch.dtype) -> None:
    """A call large enough to be shared out (a prefill's 200 rows) gives, on 1, 2 and 3 threads, the bits
    of each row computed alone: rows are split at whole-row boundaries and never combined."""
    gen = torch.Generator().manual_seed(5)
    tokens, heads, kv_heads, dim, inter = 200, 9, 3, 64, 1536
    hidden, delta = torch.randn(tokens, 576, generator=gen).to(dtype), torch.randn(tokens, 576, generator=gen).to(dtype)
    weight = torch.randn(576, generator=gen).to(dtype)
    qkv = torch.randn(tokens, (heads + 2 * kv_heads) * dim, generator=gen).to(dtype)
    angles = torch.rand(tokens, dim // 2, generator=gen) * 6
    cos, sin = (torch.cat([f(angles)] * 2, dim=1).to(dtype) for f in (torch.cos, torch.sin))
    gate_up = (torch.randn(tokens, 2 * inter, generator=gen) * 4).to(dtype)

    def alone() -> tuple[torch.Tensor, ...]:
        summed = hidden.clone()
        normed = torch.cat([add_rms_norm(summed[r:r + 1], weight, 1e-5, delta[r:r + 1], threads=1)
                            for r in range(tokens)])
        split = [rope_split(qkv[r:r + 1], cos[r:r + 1], sin[r:r + 1], heads, kv_heads, dim, threads=1)
                 for r in range(tokens)]
        activated = torch.cat([silu_mul(gate_up[r:r + 1], threads=1) for r in range(tokens)])
        return (summed, normed, *(torch.cat(part) for part in zip(*split, strict=True)), activated)

    expected = alone()
    for threads in (1, 2, 3):
        summed = hidden.clone()
        with count_kernels() as counted:
            normed = add_rms_norm(summed, weight, 1e-5, delta, threads=threads)
            ours = (summed, normed, *rope_split(qkv, cos, sin, heads, kv_heads, dim, threads=threads),
                    silu_mul(gate_up, threads=threads))
        assert counted.shared_calls == (0 if threads == 1 else 3)  # each call went to the helper threads
        assert all(torch.equal(a, b) for a, b in zip(ours, expected, strict=True)), threads


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_prepared_calls_write_what_the_functions_return_on_every_run(backend: Backend, dtype: torch.dtype) -> None:
    gen = torch.Generator().manual_seed(5)
    tokens, heads, kv_heads, dim = 3, 4, 2, 8

    def randn(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=gen).to(dtype)

    hidden, weight, delta = randn(tokens, 40), randn(40), randn(tokens, 40)
    qkv, cos, sin, gate_up = randn(tokens, (heads + 2 * kv_heads) * dim), randn(tokens, dim), randn(tokens, dim), \
        randn(tokens, 2 * 20)
    with_delta, without = torch.empty_like(hidden), torch.empty_like(hidden)
    q, k, v = (torch.empty(tokens, n, dim, dtype=dtype) for n in (heads, kv_heads, kv_heads))
    activated = torch.empty(tokens, 20, dtype=dtype)
    ours_hidden, expected_hidden = hidden.clone(), hidden.clone()
    calls = [
        prepare_add_rms_norm(ours_hidden, weight, 1e-5, delta, with_delta, backend=backend),
        prepare_add_rms_norm(ours_hidden, weight, 1e-5, None, without, backend=backend),
        prepare_rope_split(qkv, cos, sin, heads, kv_heads, dim, (q, k, v), backend=backend),
        prepare_silu_mul(gate_up, activated, backend=backend),
    ]
    for factor in (1.0, -2.0):  # each run reads the inputs as they are then
        for tensor in (qkv, gate_up):
            tensor.mul_(factor)
        run_prepared(calls)
        assert torch.equal(with_delta, add_rms_norm(expected_hidden, weight, 1e-5, delta, backend=backend))
        assert torch.equal(ours_hidden, expected_hidden)
        assert torch.equal(without, add_rms_norm(expected_hidden, weight, 1e-5, backend=backend))
        expected = rope_split(qkv, cos, sin, heads, kv_heads, dim, backend=backend)
        assert all(torch.equal(ours, theirs) for ours, theirs in zip((q, k, v), expected, strict=True))
        assert torch.equal(activated, silu_mul(gate_up, backend=backend))


@pytest.mark.parametrize(("call", "message"), [
    (lambda: add_rms_norm(torch.zeros(2, 4), torch.zeros(3), 1e-5), r"weight \[4\]"),
    (lambda: add_rms_norm(torch.zeros(2, 4), torch.zeros(4), 1e-5, torch.zeros(2, 4, dtype=torch.bfloat16)),
     "delta has dtype torch.bfloat16"),
    (lambda: add_rms_norm(torch.zeros(2, 4, dtype=torch.float16), torch.zeros(4, dtype=torch.float16), 1e-5),
     "not supported"),
    (lambda: rope_split(torch.zeros(1, 12), torch.zeros(1, 3), torch.zeros(1, 3), 2, 1, 3), "dim even"),
    (lambda: rope_split(torch.zeros(1, 12), torch.zeros(1, 4), torch.zeros(1, 8)[:, ::2], 1, 1, 4), "contiguous"),
    (lambda: silu_mul(torch.zeros(2, 5)), r"2 \* inter"),
    (lambda: prepare_silu_mul(torch.zeros(2, 8), torch.zeros(2, 3)), r"out must be \[2, 4\]"),
    (lambda: prepare_add_rms_norm(torch.zeros(2, 4), torch.zeros(4), 1e-5, None, torch.zeros(4, 2).T),
     "out must be a contiguous CPU tensor"),
    (lambda: prepare_add_rms_norm(torch.zeros(2, 4), torch.zeros(4), 1e-5, None, torch.zeros(2, 4).bfloat16()),
     "out has dtype torch.bfloat16"),
    (lambda: prepare_rope_split(torch.zeros(1, 16), torch.zeros(1, 4), torch.zeros(1, 4), 2, 1, 4,
                                (torch.zeros(1, 2, 4), torch.zeros(1, 1, 4), torch.zeros(1, 2, 4))),
     r"v must be \[1, 1, 4\]"),
    (lambda: prepare_silu_mul(torch.zeros(8, 2).T, torch.zeros(2, 4)), "gate_up must be a contiguous"),
    (lambda: prepare_silu_mul(gate_up := torch.zeros(2, 8), gate_up.view(-1)[4:12].view(2, 4)),
     "out shares memory with gate_up"),
])
def test_bad_arguments_raise(call: object, message: str) -> None:
    with pytest.raises(KernelArgumentError, match=message):
        call()  # type: ignore[operator]
