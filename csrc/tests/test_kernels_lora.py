"""lora_apply: the documented order of operations against exact oracles (the shrink is the linear
kernel's product bit for bit; the expand's chain of fused multiply-adds emulated with exact
fractions), every ISA variant, random batches against a float64 reference and the torch fallback,
a row's bits independent of its batch, its threads and the rank padding, and bad arguments."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import pyagent_kernels
from pyagent_kernels import Backend, KernelArgumentError, run_prepared
from pyagent_kernels.linear import linear
from pyagent_kernels.lora import LoRAStack, lora_apply, prepare_lora

COMPILED = bool(pyagent_kernels.status()["compiled"])
needs_c = pytest.mark.skipif(not COMPILED, reason="pyagent_kernels._C is not built")
BACKENDS: list[Backend] = ["c", "torch"] if COMPILED else ["torch"]


def random_stack(gen: torch.Generator, max_loras: int, max_rank: int, in_features: int, sizes: list[int],
                 ranks: list[list[int]], dtype: torch.dtype = torch.float32) -> LoRAStack:
    """A stack whose slot s holds random matrices of rank ``ranks[s][k]`` on slice k (0: slice left alone)."""
    stack = LoRAStack(max_loras, max_rank, in_features, sizes, dtype)
    for slot, slot_ranks in enumerate(ranks):
        for k, rank in enumerate(slot_ranks):
            if rank:
                a = torch.randn(rank, in_features, generator=gen) / in_features**0.5
                b = torch.randn(sizes[k], rank, generator=gen)
                stack.load(slot, k, a, b, 0.5 + slot + k)
    return stack


def reference(x: torch.Tensor, y: torch.Tensor, slots: torch.Tensor, stack: LoRAStack) -> torch.Tensor:
    """float64 ``y + scale * (x A^T) B^T`` per row and slice, from the matrices as stored."""
    out = y.double().clone()
    starts = stack.starts.tolist()
    for row, slot in enumerate(slots.tolist()):
        for k in range(stack.slices):
            rank = int(stack.ranks[slot, k]) if slot >= 0 else 0
            if rank and float(stack.scales[slot, k]):
                u = x[row].double() @ stack.a[slot, k, :rank].double().T
                out[row, starts[k] : starts[k + 1]] += float(stack.scales[slot, k]) * (
                    u @ stack.b[slot, :rank, starts[k] : starts[k + 1]].double())
    return out


def round_f32(value: Fraction) -> Fraction:
    """``value`` rounded to the nearest float32, ties to even (normal range)."""
    if value == 0:
        return Fraction(0)
    exponent = 0
    magnitude = abs(value)
    while magnitude >= 2**24:
        magnitude /= 2
        exponent += 1
    while magnitude < 2**23:
        magnitude *= 2
        exponent -= 1
    return (1 if value > 0 else -1) * Fraction(round(magnitude)) * Fraction(2) ** exponent


@needs_c
def test_the_shrink_is_the_linear_kernels_product_bit_for_bit(c_isa: str) -> None:
    """With B the identity (out = rank) and scale 1 on a zero y, the delta is u = x A^T itself."""
    gen = torch.Generator().manual_seed(1)
    for in_features, rank in ((576, 16), (37, 5), (1536, 8)):
        x = torch.randn(7, in_features, generator=gen)
        a = torch.randn(rank, in_features, generator=gen)
        stack = LoRAStack(2, rank, in_features, [rank])
        stack.load(1, 0, a, torch.eye(rank), 1.0)
        y = torch.zeros(7, rank)
        lora_apply(x, y, torch.ones(7, dtype=torch.int32), stack, backend="c")
        assert torch.equal(y, linear(x, a, backend="c"))


@needs_c
def test_the_expand_is_a_chain_of_fused_multiply_adds_then_one_scaled_add(c_isa: str) -> None:
    """With A the identity (in = rank), u = x; each output is then fma(u[j], b[j, n], acc) for j = 0 ..
    rank - 1 from 0, scaled and added to y, each step rounded to float32: emulated with exact fractions."""
    gen = torch.Generator().manual_seed(2)
    rank, out, rows, scale = 11, 40, 3, 0.37
    x, b = torch.randn(rows, rank, generator=gen), torch.randn(out, rank, generator=gen)
    y = torch.randn(rows, out, generator=gen)
    stack = LoRAStack(1, 16, rank, [out])
    stack.load(0, 0, torch.eye(rank), b, scale)
    ours = y.clone()
    lora_apply(x, ours, torch.zeros(rows, dtype=torch.int32), stack, backend="c")
    scale32 = np.float32(scale)
    for row in range(rows):
        for n in range(out):
            acc = Fraction(0)
            for j in range(rank):
                acc = round_f32(Fraction(float(x[row, j])) * Fraction(float(b[n, j])) + acc)
            delta = np.float32(float(acc)) * scale32
            assert np.float32(y[row, n].item()) + delta == np.float32(ours[row, n].item())


@needs_c
def test_every_isa_variant_gives_the_same_bits() -> None:
    gen = torch.Generator().manual_seed(3)
    stack = random_stack(gen, 3, 16, 200, [64, 16, 16], [[16, 0, 8], [4, 4, 4], [0, 16, 0]])
    x, y = torch.randn(9, 200, generator=gen), torch.randn(9, 96, generator=gen)
    slots = torch.tensor([2, -1, 0, 1, 1, 0, -1, 2, 0], dtype=torch.int32)
    results = []
    for isa in pyagent_kernels.status()["isa_supported"]:
        with pyagent_kernels.using_isa(isa):
            for dtype in (torch.float32, torch.bfloat16):
                typed = LoRAStack(3, 16, 200, [64, 16, 16], dtype)
                typed.a.copy_(stack.a), typed.b.copy_(stack.b), typed.scales.copy_(stack.scales)
                typed.ranks.copy_(stack.ranks)
                out = y.to(dtype, copy=True)
                lora_apply(x.to(dtype), out, slots, typed, backend="c")
                results.append((dtype, out))
    for dtype in (torch.float32, torch.bfloat16):
        same = [out for kind, out in results if kind == dtype]
        assert all(torch.equal(same[0], other) for other in same[1:])


@settings(max_examples=30, deadline=None)
@given(rows=st.integers(0, 12), in_features=st.integers(1, 300), sizes=st.lists(st.integers(1, 300), min_size=1,
       max_size=3), max_loras=st.integers(1, 4), max_rank=st.integers(1, 20), seed=st.integers(0, 2**16),
       dtype=st.sampled_from([torch.float32, torch.bfloat16]), backend=st.sampled_from(BACKENDS))
def test_random_batches_match_float64(rows: int, in_features: int, sizes: list[int], max_loras: int, max_rank: int,
                                      seed: int, dtype: torch.dtype, backend: Backend) -> None:
    gen = torch.Generator().manual_seed(seed)
    ranks = torch.randint(0, max_rank + 1, (max_loras, len(sizes)), generator=gen).tolist()
    stack = random_stack(gen, max_loras, max_rank, in_features, sizes, ranks, dtype)
    x = torch.randn(rows, in_features, generator=gen).to(dtype)
    y = torch.randn(rows, sum(sizes), generator=gen).to(dtype)
    slots = torch.randint(-1, max_loras, (rows,), generator=gen, dtype=torch.int32)
    ours = y.clone()
    lora_apply(x, ours, slots, stack, backend=backend)
    expected = reference(x, y, slots, stack)
    tolerance = 1e-5 if dtype == torch.float32 else 1e-2
    assert torch.all((ours.double() - expected).abs() <= tolerance * (expected.abs() + 1))
    untouched = slots == -1
    assert torch.equal(ours[untouched], y[untouched])


@needs_c
def test_a_rows_bits_depend_on_nothing_but_its_input_and_adapter() -> None:
    """Alone or in a shuffled batch of other adapters, on 1 or 2 threads, padded to rank 16 or 64."""
    gen = torch.Generator().manual_seed(4)
    ranks = [[8, 8, 8], [16, 0, 4], [2, 2, 0]]
    stack = random_stack(gen, 3, 16, 576, [576, 192, 192], ranks)
    wide = LoRAStack(5, 64, 576, [576, 192, 192])
    wide.a[:3, :, :16] = stack.a
    wide.b[:3, :16] = stack.b
    wide.scales[:3], wide.ranks[:3] = stack.scales, stack.ranks
    x, y = torch.randn(40, 576, generator=gen), torch.randn(40, 960, generator=gen)
    slots = torch.randint(-1, 3, (40,), generator=gen, dtype=torch.int32)
    batched = y.clone()
    lora_apply(x, batched, slots, stack, threads=2, backend="c")
    for other, threads in ((stack, 1), (wide, 2)):
        again = y.clone()
        lora_apply(x, again, slots, other, threads=threads, backend="c")
        assert torch.equal(again, batched)
    for row in range(40):
        alone = y[row : row + 1].clone()
        lora_apply(x[row : row + 1], alone, slots[row : row + 1], stack, threads=1, backend="c")
        assert torch.equal(alone, batched[row : row + 1])


@pytest.mark.parametrize("backend", BACKENDS)
def test_prepared_calls_read_the_current_slots_and_adapters(backend: Backend) -> None:
    gen = torch.Generator().manual_seed(5)
    stack = random_stack(gen, 2, 8, 64, [32], [[8], [3]])
    x, y = torch.randn(4, 64, generator=gen), torch.zeros(4, 32)
    slots = torch.tensor([0, 1, -1, 0], dtype=torch.int32)
    call = prepare_lora(x, y, slots, stack, backend=backend)
    run_prepared([call])
    expected = torch.zeros(4, 32)
    lora_apply(x, expected, slots, stack, backend=backend)
    assert torch.equal(y, expected)
    slots.copy_(torch.tensor([1, 1, 1, -1]))
    stack.clear(0)
    y.zero_()
    run_prepared([call])
    expected = torch.zeros(4, 32)
    lora_apply(x, expected, slots, stack, backend=backend)
    assert torch.equal(y, expected) and torch.equal(y[3], torch.zeros(32)) and y[:3].abs().sum() > 0


@pytest.mark.parametrize("backend", BACKENDS)
def test_bad_arguments_are_refused_before_anything_is_written(backend: Backend) -> None:
    stack = LoRAStack(2, 4, 8, [6, 2])
    stack.load(0, 0, torch.ones(4, 8), torch.ones(6, 4), 1.0)
    x, y = torch.ones(3, 8), torch.zeros(3, 8)
    with pytest.raises(KernelArgumentError, match=r"slots\[1\] = 2 is outside \[-1, 2\)"):
        lora_apply(x, y, torch.tensor([0, 2, 0], dtype=torch.int32), stack, backend=backend)
    call = prepare_lora(x, y, torch.tensor([0, -2, 0], dtype=torch.int32), stack, backend=backend)
    with pytest.raises(KernelArgumentError, match=r"slots\[1\] = -2"):
        run_prepared([call])
    assert torch.equal(y, torch.zeros(3, 8))
    with pytest.raises(KernelArgumentError, match=r"slots has dtype torch\.int64"):
        lora_apply(x, y, torch.zeros(3, dtype=torch.int64), stack, backend=backend)
    with pytest.raises(KernelArgumentError, match=r"y has shape \(3, 7\)"):
        lora_apply(x, torch.zeros(3, 7), torch.zeros(3, dtype=torch.int32), stack, backend=backend)
    with pytest.raises(KernelArgumentError, match=r"x has dtype torch\.bfloat16"):
        lora_apply(x.bfloat16(), y, torch.zeros(3, dtype=torch.int32), stack, backend=backend)
    with pytest.raises(KernelArgumentError, match="y shares memory with x"):
        lora_apply(y, y, torch.zeros(3, dtype=torch.int32), stack, backend=backend)


def test_loading_a_slot_checks_its_shapes_rank_and_scale() -> None:
    stack = LoRAStack(2, 4, 8, [6, 2])
    with pytest.raises(KernelArgumentError, match=r"slice 1 takes a \[rank, 8\] and b \[2, rank\]"):
        stack.load(0, 1, torch.ones(4, 8), torch.ones(6, 4), 1.0)
    with pytest.raises(KernelArgumentError, match=r"rank 5 is outside \[1, max_rank = 4\]"):
        stack.load(0, 0, torch.ones(5, 8), torch.ones(6, 5), 1.0)
    with pytest.raises(KernelArgumentError, match="scale must be finite"):
        stack.load(0, 0, torch.ones(4, 8), torch.ones(6, 4), float("nan"))
    with pytest.raises(KernelArgumentError, match=r"slot 2 is outside \[0, 2\)"):
        stack.load(2, 0, torch.ones(4, 8), torch.ones(6, 4), 1.0)
    with pytest.raises(KernelArgumentError, match="must be positive"):
        LoRAStack(0, 4, 8, [6])
