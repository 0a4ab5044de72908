"""linear with block-quantized weights at precision="exact": QuantizedWeight's values against the gguf package's own
dequantization (every GGUF block format, with normal, subnormal and zero float16 scales), and the C
kernel (every ISA variant, register and panel paths, stack and heap buffers, any thread count)
bit-identical to the dense product with those values and to the generic variant."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from gguf import GGMLQuantizationType
from gguf.quants import dequantize, quantize
from hypothesis import given, settings
from hypothesis import strategies as st

import pyagent_kernels
from pyagent_kernels import KernelArgumentError, run_prepared
from pyagent_kernels.linear import linear, prepare_linear
from pyagent_kernels.quantized import FORMATS, QuantizedWeight, shared_format

needs_c = pytest.mark.skipif(not pyagent_kernels.status()["compiled"], reason="pyagent_kernels._C is not built")
GGML_TYPES = {name: GGMLQuantizationType[name.upper()] for name in FORMATS}
#: Byte offsets of each GGUF block's float16 fields (scale d, and minimum or dmin).
HALVES = {"q4_0": (0,), "q4_1": (0, 2), "q5_0": (0,), "q5_1": (0, 2), "q8_0": (0,), "q4_k": (0, 2),
          "q5_k": (0, 2), "q6_k": (208,)}
#: The formats whose GGUF blocks are the kernel's layout with wider scales; the K-quants are repacked.
BLOCK_32 = [fmt for fmt, spec in FORMATS.items() if spec.gguf_weights == 32]
DTYPES = [torch.float32, torch.bfloat16]
SUPPORTED_ISAS = pyagent_kernels.status()["isa_supported"]


def exact(x: torch.Tensor, weight: QuantizedWeight, **options: object) -> torch.Tensor:
    """``linear`` at precision "exact" (the dequantized matrix's product, which these tests check)."""
    return linear(x, weight, precision="exact", **options)  # type: ignore[arg-type]


def gguf_blocks(fmt: str, out: int, inner: int, seed: int) -> np.ndarray:
    """Random GGUF rows of ``fmt``: random bytes, with the float16 fields set to finite values of
    either sign, normal, subnormal or zero."""
    rng = np.random.default_rng(seed)
    spec = FORMATS[fmt]
    count = inner // spec.gguf_weights
    blocks = rng.integers(0, 256, size=(out, count, spec.gguf_bytes), dtype=np.uint8)
    for offset in HALVES[fmt]:
        halves = rng.choice([-1.0, 1.0], size=(out, count)) * np.exp2(rng.uniform(-26, 2, (out, count)))
        halves[rng.random((out, count)) < 0.1] = 0.0
        blocks[..., offset : offset + 2] = halves.astype(np.float16).view(np.uint8).reshape(out, count, 2)
    return blocks.reshape(out, -1)


def weight_and_reference(fmt: str, out: int, inner: int, seed: int) -> tuple[QuantizedWeight, torch.Tensor]:
    """A QuantizedWeight and the gguf package's float32 dequantization of the same bytes."""
    blocks = gguf_blocks(fmt, out, inner, seed)
    reference = dequantize(blocks, GGML_TYPES[fmt]).reshape(out, inner)
    return QuantizedWeight.from_gguf(torch.from_numpy(blocks), fmt, inner), torch.from_numpy(reference.copy())


@pytest.mark.parametrize("fmt", FORMATS)
def test_values_are_the_gguf_packages(fmt: str) -> None:
    """dequantize() and rows() give exactly gguf.quants.dequantize's float32 values."""
    inner = 3 * FORMATS[fmt].gguf_weights
    weight, reference = weight_and_reference(fmt, 7, inner, seed=1)
    assert weight.shape == (7, inner) and FORMATS[fmt].ggml_type == GGML_TYPES[fmt].value
    fields = np.concatenate([gguf_blocks(fmt, 7, inner, seed=1).reshape(7, 3, -1)[..., o : o + 2] for o in HALVES[fmt]])
    scales = np.abs(fields.copy().view(np.float16))
    assert (scales == 0).any() and ((scales > 0) & (scales < np.finfo(np.float16).smallest_normal)).any()
    assert torch.equal(weight.dequantize(), reference)
    assert torch.equal(weight.dequantize(torch.bfloat16), reference.to(torch.bfloat16))
    index = torch.tensor([6, 0, 6])
    assert torch.equal(weight.rows(index), reference[index])


@pytest.mark.parametrize("fmt", BLOCK_32)
def test_quantize_round_trip_through_the_gguf_package(fmt: str) -> None:
    """Rows the gguf package quantized from real numbers decode to what it dequantizes them to."""
    values = np.random.default_rng(2).standard_normal((5, 64)).astype(np.float32)
    blocks = quantize(values, GGML_TYPES[fmt])
    weight = QuantizedWeight.from_gguf(torch.from_numpy(blocks), fmt, 64)
    assert torch.equal(weight.dequantize(), torch.from_numpy(dequantize(blocks, GGML_TYPES[fmt]).reshape(5, 64)))


# AVX-512: rows <= 4 decode into registers in 4 x 4 tiles, 5 to 16 rows in columns of every row,
# more rows decode panels; AVX2: 1 or 2 rows decode into registers (sub-tiles of 1 x 4 and 2 x 2
# weight rows), more rows decode panels; out % 4 != 0 leaves single-row tiles; out > 48 splits the
# work into chunks for the helper threads; rows over 576 float32 (1152 bfloat16) weights are summed in
# slices, 64 input rows at a time.
# The K-quants' layouts are Q4_1's, Q5_1's and Q6_K's, which the 32-weight formats' shapes cover; they
# take a few shapes of whole super-blocks.
SHAPES = [(1, 1, 32), (1, 7, 96), (2, 11, 96), (2, 6, 1216), (3, 130, 64), (4, 9, 576), (5, 13, 32), (9, 70, 1536),
          (16, 5, 64), (17, 3, 96), (33, 6, 160), (70, 27, 1216)]
K_SHAPES = [(1, 7, 256), (2, 6, 1280), (5, 13, 256), (70, 27, 512)]
PRODUCTS = [(fmt, *shape) for fmt in FORMATS for shape in (SHAPES if fmt in BLOCK_32 else K_SHAPES)]


@needs_c
@pytest.mark.parametrize(("fmt", "rows", "out", "inner"), PRODUCTS)
def test_product_has_the_bits_of_the_dense_product(c_isa: str, fmt: str, rows: int, out: int, inner: int) -> None:
    weight, reference = weight_and_reference(fmt, out, inner, seed=rows * out + inner)
    gen = torch.Generator().manual_seed(inner)
    for dtype in DTYPES:
        x = torch.randn(rows, inner, generator=gen).to(dtype)
        dense = reference.to(dtype)
        batched = exact(x, weight, backend="c")
        assert torch.equal(batched, linear(x, dense, backend="c")), (c_isa, dtype)
        assert torch.equal(batched[rows - 1], exact(x[rows - 1 :], weight, backend="c")[0]), (c_isa, dtype)
        sums = exact(x, weight, out_dtype=torch.float32, backend="c")
        if dtype == torch.bfloat16:
            assert torch.equal(sums, linear(x, dense, out_dtype=torch.float32, backend="c"))
        with pyagent_kernels.using_isa("generic"):
            assert torch.equal(sums, exact(x, weight, out_dtype=torch.float32, backend="c")), (c_isa, dtype)


@needs_c
@pytest.mark.parametrize("dtype", DTYPES)
def test_rows_longer_than_the_stack_panel(dtype: torch.dtype) -> None:
    """A decoded row over 64 KiB goes through per-worker heap buffers; the bits do not change."""
    inner = 32 * 1056  # float32: 132 KiB, bfloat16: 66 KiB per decoded row
    weight, reference = weight_and_reference("q4_1", 10, inner, seed=3)
    x = torch.randn(6, inner, generator=torch.Generator().manual_seed(3)).to(dtype)
    expected = linear(x, reference.to(dtype), threads=1, backend="c")
    for threads in (1, 2, 3):
        assert torch.equal(exact(x, weight, threads=threads, backend="c"), expected)


@needs_c
@settings(max_examples=30, deadline=None)
@given(rows=st.integers(1, 10), out=st.integers(1, 150), blocks=st.integers(1, 6), threads=st.integers(1, 3),
       fmt=st.sampled_from(sorted(FORMATS)), dtype=st.sampled_from(DTYPES), seed=st.integers(0, 2**16),
       isa=st.sampled_from(SUPPORTED_ISAS or ["none"]))
def test_each_row_is_the_same_alone_or_batched(rows: int, out: int, blocks: int, threads: int, fmt: str,
                                              dtype: torch.dtype, seed: int, isa: str) -> None:
    inner = FORMATS[fmt].gguf_weights * blocks
    weight, reference = weight_and_reference(fmt, out, inner, seed)
    x = torch.randn(rows, inner, generator=torch.Generator().manual_seed(seed)).to(dtype)
    with pyagent_kernels.using_isa(isa):
        batched = exact(x, weight, threads=threads, backend="c")
        assert torch.equal(batched, linear(x, reference.to(dtype), threads=threads, backend="c"))
        for row in range(rows):
            assert torch.equal(batched[row], exact(x[row : row + 1], weight, threads=1, backend="c")[0]), row


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_torch_fallback_uses_the_dequantized_matrix(fmt: str, dtype: torch.dtype) -> None:
    inner = 2 * FORMATS[fmt].gguf_weights
    weight, reference = weight_and_reference(fmt, 12, inner, seed=4)
    x = torch.randn(3, inner).to(dtype)
    assert torch.equal(exact(x, weight, backend="torch"), linear(x, reference.to(dtype), backend="torch"))


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("precision", ["exact", "int8"])
def test_a_prepared_product_gives_the_bits_of_linear(fmt: str, dtype: torch.dtype, precision: str) -> None:
    inner = 2 * FORMATS[fmt].gguf_weights
    weight, _ = weight_and_reference(fmt, 7, inner, seed=9)
    x = torch.randn(3, inner, generator=torch.Generator().manual_seed(9)).to(dtype)
    out = torch.empty(3, 7)
    run_prepared([prepare_linear(x, weight, out, threads=1, precision=precision)])  # type: ignore[arg-type]
    assert torch.equal(out, linear(x, weight, out_dtype=torch.float32, threads=1, precision=precision))  # type: ignore[arg-type]


def test_cat_stacks_rows() -> None:
    first, first_ref = weight_and_reference("q8_0", 3, 64, seed=5)
    second, second_ref = weight_and_reference("q8_0", 2, 64, seed=6)
    both = QuantizedWeight.cat([first, second])
    assert both.shape == (5, 64) and torch.equal(both.dequantize(), torch.cat((first_ref, second_ref)))
    packed_again = QuantizedWeight(both.packed, "q8_0", 64)
    assert torch.equal(packed_again.dequantize(), both.dequantize())


@pytest.mark.parametrize(("formats", "shared"), [
    (("q5_0", "q5_0", "q8_0"), "q8_0"),  # a Q4_K_M file's q, k and v projections
    (("q4_0", "q5_0"), "q5_0"),
    (("q4_k", "q4_1"), "q4_1"),
    (("q5_k", "q4_1"), "q5_1"),
    (("q8_0", "q6_k"), "q6_k"),
    (("q4_0", "q6_k"), "q6_k"),
])
def test_cat_repacks_mixed_formats_exactly(formats: tuple[str, ...], shared: str) -> None:
    """Parts of different formats stack in the smallest layout holding them all, values unchanged."""
    parts = [weight_and_reference(fmt, 2 + i, 256, seed=i) for i, fmt in enumerate(formats)]
    assert shared_format([weight for weight, _ in parts]) == shared
    both = QuantizedWeight.cat([weight for weight, _ in parts])
    assert both.format == shared and both.type_id == FORMATS[shared].layout
    assert torch.equal(both.dequantize(), torch.cat([reference for _, reference in parts]))


def test_formats_without_a_shared_layout_stack_for_int8_only() -> None:
    """GGUF rows of formats no exact layout holds together stack (the int8 product reads each part's
    blocks), but their exact product is refused; rows of the exact layout alone cannot stack at all."""
    with_min, without = weight_and_reference("q4_1", 1, 256, 0)[0], weight_and_reference("q6_k", 1, 256, 0)[0]
    assert shared_format([with_min, without]) is None
    assert shared_format([with_min, weight_and_reference("q4_1", 1, 512, 0)[0]]) is None
    both = QuantizedWeight.cat([with_min, without])
    assert both.format == "q4_1+q6_k" and both.shape == (2, 256)
    with pytest.raises(KernelArgumentError, match=r"\(q4_1\+q6_k\) share no block layout"):
        linear(torch.zeros(1, 256), both, precision="exact")
    split = QuantizedWeight(without.packed, "q6_k", 256)  # no GGUF blocks to keep
    with pytest.raises(KernelArgumentError, match="cannot stack q6_k rows of 256 weights onto q4_1"):
        QuantizedWeight.cat([with_min, split])
    with pytest.raises(KernelArgumentError, match="cannot stack rows of 512 weights onto rows of 256"):
        QuantizedWeight.cat([with_min, weight_and_reference("q4_1", 1, 512, 0)[0]])


@pytest.mark.parametrize(("build", "message"), [
    (lambda: QuantizedWeight.from_gguf(torch.zeros(2, 20, dtype=torch.uint8), "q3_k", 32), "unknown quantized format"),
    (lambda: QuantizedWeight.from_gguf(torch.zeros(2, 144, dtype=torch.uint8), "q4_k", 32), "blocks of 256 weights"),
    (lambda: QuantizedWeight.from_gguf(torch.zeros(2, 20, dtype=torch.uint8), "q4_1", 48), "positive multiple"),
    (lambda: QuantizedWeight.from_gguf(torch.zeros(2, 21, dtype=torch.uint8), "q4_1", 32), r"uint8 \[out, 20\]"),
    (lambda: QuantizedWeight.from_gguf(torch.zeros(2, 20), "q4_1", 32), r"uint8 \[out, 20\]"),
    (lambda: QuantizedWeight(torch.zeros(2, 20, dtype=torch.uint8), "q4_1", 32), r"packed q4_1 .* \[out, 24\]"),
    (lambda: QuantizedWeight.cat([]), "at least one"),
    (lambda: linear(torch.zeros(1, 64), weight_and_reference("q8_0", 2, 32, 0)[0]), "features per row"),
    (lambda: linear(torch.zeros(1, 32, dtype=torch.float16), weight_and_reference("q8_0", 2, 32, 0)[0]),
     "float32 or torch.bfloat16"),
])
def test_bad_arguments_raise(build: object, message: str) -> None:
    with pytest.raises(KernelArgumentError, match=message):
        build()  # type: ignore[operator]
