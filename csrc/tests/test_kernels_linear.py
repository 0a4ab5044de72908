"""linear: C kernel (every ISA variant, any thread count) vs a numpy emulation of the documented
summation order, batch invariance of C and torch, and argument errors."""

from __future__ import annotations

from contextlib import nullcontext

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import pyagent_kernels
from pyagent_kernels import Backend, KernelArgumentError, run_prepared
from pyagent_kernels.linear import linear, prepare_linear

COMPILED = bool(pyagent_kernels.status()["compiled"])
needs_c = pytest.mark.skipif(not COMPILED, reason="pyagent_kernels._C is not built")
BACKENDS: list[Backend] = ["c", "torch"] if COMPILED else ["torch"]
LANES = 16
SUPPORTED_ISAS = pyagent_kernels.status()["isa_supported"]


def _tree(lanes: np.ndarray) -> np.ndarray:
    """Sum the last axis (16 float32 lanes) as (j, j + 8), (j, j + 4), (j, j + 2), (0, 1)."""
    a = lanes[..., :8] + lanes[..., 8:]
    b = a[..., :4] + a[..., 4:]
    c = b[..., :2] + b[..., 2:]
    return c[..., 0] + c[..., 1]


def bf16_reference(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """The documented bfloat16 order in numpy float32. Products of two bfloat16 values are exact in
    float32, so a float32 add of the product is exactly the kernel's fused multiply-add."""
    rows, inner = x.shape
    pad = -inner % (2 * LANES)
    xs = torch.nn.functional.pad(x.float(), (0, pad)).numpy().reshape(rows, 1, -1, LANES, 2)
    ws = torch.nn.functional.pad(w.float(), (0, pad)).numpy().reshape(1, w.shape[0], -1, LANES, 2)
    acc = np.zeros((rows, w.shape[0], LANES), dtype=np.float32)
    for chunk in range(xs.shape[2]):
        for element in (1, 0):
            acc = acc + xs[:, :, chunk, :, element] * ws[:, :, chunk, :, element]
    return torch.from_numpy(_tree(acc))


def _inputs(rows: int, out: int, inner: int, dtype: torch.dtype, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return (torch.randn(rows, inner, generator=gen).to(dtype), torch.randn(out, inner, generator=gen).to(dtype))


SHAPES = [(1, 1, 1), (1, 7, 5), (3, 9, 37), (5, 13, 64), (4, 8, 576), (9, 130, 1000), (1, 960, 576), (33, 70, 96),
          (70, 27, 1201), (2, 5, 33), (6, 14, 48)]
# Tiles are up to 4 input rows by 4 weight rows (AVX2 runs them as sub-tiles of 2 x 2, 1 x 4, 2 x 1
# and 1 x 1): rows and out % 4 of 1, 2 and 3 leave every smaller tile; inner % 16 (32) != 0 a tail.
# Rows longer than a slice of the inner dimension (float32: 576, bfloat16: 1152 elements) are summed
# slice by slice, 64 input rows at a time: 70 rows are 64 + 6 (4-row tiles and a 2-row one), 27
# weight rows are blocks of 12, 12 and 3 (single-row tiles), and 1201 / 2410 elements end in a short
# chunk.
SLICED = [(70, 27, 1201), (67, 13, 2410)]


@needs_c
@pytest.mark.parametrize(("rows", "out", "inner"), SHAPES)
def test_bfloat16_follows_the_documented_order_bit_for_bit(c_isa: str, rows: int, out: int, inner: int) -> None:
    x, w = _inputs(rows, out, inner, torch.bfloat16, seed=rows * out + inner)
    expected = bf16_reference(x, w)
    assert torch.equal(linear(x, w, out_dtype=torch.float32, backend="c"), expected)
    assert torch.equal(linear(x, w, backend="c"), expected.to(torch.bfloat16))


@needs_c
@pytest.mark.parametrize(("rows", "out", "inner"), SHAPES)
def test_float32_is_close_to_float64_and_the_same_on_every_isa(c_isa: str, rows: int, out: int, inner: int) -> None:
    x, w = _inputs(rows, out, inner, torch.float32, seed=inner)
    got = linear(x, w, backend="c")
    torch.testing.assert_close(got.double(), x.double() @ w.double().T, atol=1e-4 * inner**0.5, rtol=1e-5)
    with pyagent_kernels.using_isa("generic"):
        assert torch.equal(linear(x, w, backend="c"), got)


@settings(max_examples=40, deadline=None)
@given(rows=st.integers(1, 12), out=st.integers(1, 40), inner=st.integers(1, 140),
       dtype=st.sampled_from([torch.float32, torch.bfloat16]), threads=st.integers(1, 3),
       backend=st.sampled_from(["c", "torch"] if COMPILED else ["torch"]),
       isa=st.sampled_from(SUPPORTED_ISAS or ["none"]))
def test_each_row_is_the_same_alone_or_batched(rows: int, out: int, inner: int, dtype: torch.dtype, threads: int,
                                               backend: str, isa: str) -> None:
    x, w = _inputs(rows, out, inner, dtype, seed=rows + out + inner)
    with pyagent_kernels.using_isa(isa) if backend == "c" else nullcontext():  # the instruction set of the C kernel
        batched = linear(x, w, threads=threads, backend=backend)  # type: ignore[arg-type]
        for row in range(rows):
            alone = linear(x[row : row + 1], w, threads=1, backend=backend)  # type: ignore[arg-type]
            assert torch.equal(alone[0], batched[row])


@needs_c
@pytest.mark.parametrize(("rows", "out", "inner"), SLICED)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_sliced_rows_are_the_same_alone_and_close_to_float64(c_isa: str, rows: int, out: int, inner: int,
                                                            dtype: torch.dtype) -> None:
    x, w = _inputs(rows, out, inner, dtype, seed=rows + inner)
    batched = linear(x, w, out_dtype=torch.float32, threads=2, backend="c")
    torch.testing.assert_close(batched.double(), x.double() @ w.double().T, atol=1e-4 * inner**0.5, rtol=1e-5)
    if dtype == torch.bfloat16:
        assert torch.equal(batched, bf16_reference(x, w))
    for row in range(rows):
        alone = linear(x[row : row + 1], w, out_dtype=torch.float32, threads=1, backend="c")
        assert torch.equal(alone[0], batched[row]), row


@needs_c
def test_threads_do_not_change_a_large_product() -> None:
    x, w = _inputs(37, 1030, 576, torch.bfloat16, seed=3)
    one = linear(x, w, threads=1, backend="c")
    for threads in (2, 3, 8):
        assert torch.equal(linear(x, w, threads=threads, backend="c"), one)


def test_torch_fallback_matches_matmul() -> None:
    x, w = _inputs(40, 24, 33, torch.float32, seed=5)
    torch.testing.assert_close(linear(x, w, backend="torch"), x @ w.T)


def test_empty_rows_give_an_empty_result() -> None:
    x, w = _inputs(0, 6, 8, torch.float32, seed=0)
    assert linear(x, w).shape == (0, 6)


@pytest.mark.parametrize(("x", "w", "kwargs", "message"), [
    (torch.zeros(2, 3), torch.zeros(4, 5), {}, "features per row"),
    (torch.zeros(2, 3), torch.zeros(4, 3, dtype=torch.bfloat16), {}, "convert one"),
    (torch.zeros(2, 3, dtype=torch.float16), torch.zeros(4, 3, dtype=torch.float16), {}, "float32 or torch.bfloat16"),
    (torch.zeros(3), torch.zeros(4, 3), {}, "2 dimensions"),
    (torch.zeros(3, 2).T, torch.zeros(4, 3), {}, "contiguous"),
    (torch.zeros(2, 3), torch.zeros(4, 3), {"threads": 0}, "threads"),
    (torch.zeros(2, 3), torch.zeros(4, 3), {"out_dtype": torch.float16}, "out_dtype"),
])
def test_bad_arguments_raise(x: torch.Tensor, w: torch.Tensor, kwargs: dict, message: str) -> None:
    with pytest.raises(KernelArgumentError, match=message):
        linear(x, w, **kwargs)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(("dtype", "out_dtype"), [(torch.float32, torch.float32), (torch.bfloat16, torch.bfloat16),
                                                  (torch.bfloat16, torch.float32)])
def test_a_prepared_product_writes_what_linear_returns_on_every_run(backend: Backend, dtype: torch.dtype,
                                                                    out_dtype: torch.dtype) -> None:
    x, w = _inputs(3, 9, 37, dtype, seed=4)
    out = torch.full((3, 9), float("nan"), dtype=out_dtype)
    call = prepare_linear(x, w, out, threads=2, backend=backend)
    for factor in (1.0, -2.0):  # each run reads x as it is then
        x.mul_(factor)
        run_prepared([call])
        assert torch.equal(out, linear(x, w, out_dtype=out_dtype, threads=2, backend=backend))


@pytest.mark.parametrize(("out", "message"), [
    (torch.zeros(2, 5), r"out has shape \(2, 5\)"),
    (torch.zeros(2, 4, dtype=torch.float16), "out has dtype torch.float16"),
    (torch.zeros(4, 2).T, "out is not contiguous"),
    (torch.zeros(2, 4, requires_grad=True), "out requires grad"),
])
def test_prepare_refuses_an_output_that_does_not_fit(out: torch.Tensor, message: str) -> None:
    with pytest.raises(KernelArgumentError, match=message):
        prepare_linear(torch.zeros(2, 3), torch.zeros(4, 3), out)


def test_prepare_refuses_an_output_sharing_memory_with_an_input() -> None:
    x, w = torch.zeros(2, 4), torch.zeros(4, 4)
    with pytest.raises(KernelArgumentError, match="out shares memory with x"):
        prepare_linear(x, w, x)
    with pytest.raises(KernelArgumentError, match="out shares memory with weight"):
        prepare_linear(x, w, w[1:3])
