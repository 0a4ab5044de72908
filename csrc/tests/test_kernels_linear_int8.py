"""The int8 path of linear (precision="int8") against an independent numpy oracle.

The oracle follows the order of operations ``include/pyagent/linear_int8.h`` documents, from published
definitions only: the activations quantized by gguf.quants' Q8_0 (its codes; the scale amax / 127
kept in float32); the weights' integer codes from gguf.quants.dequantize of the blocks with their
float16 scales set to 1 and minima to 0 (and a K-quant's sub-block scales to 1), the sub-block scales
from gguf.quants' Q4_K.get_scale_min or Q6_K's signed bytes; every fused multiply-add rounded once
(float64, rounded to odd, then to float32). Every ISA variant, both dot
products, AMX's tile path (its products emulated in C here) and the torch fallback must give its bits.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest
import torch
from gguf import GGMLQuantizationType
from gguf.quants import Q4_K, dequantize, quantize
from hypothesis import given, settings
from hypothesis import strategies as st

import pyagent_kernels
from pyagent_kernels import KernelArgumentError, run_prepared, using_int8
from pyagent_kernels._extension import load
from pyagent_kernels._int8_layout import GGUF_BLOCKS, GROUP_ROWS, deinterleave, group_bytes, interleave
from pyagent_kernels.linear import linear, prepare_linear
from pyagent_kernels.quantized import QuantizedWeight

from .test_kernels_linear_quantized import gguf_blocks

COMPILED = bool(pyagent_kernels.status()["compiled"])
needs_c = pytest.mark.skipif(not COMPILED, reason="pyagent_kernels._C is not built")
SUPPORTED_ISAS = pyagent_kernels.status()["isa_supported"]
BLOCK_32 = [fmt for fmt, (_, weights, _) in GGUF_BLOCKS.items() if weights == 32]
K_QUANTS = [fmt for fmt in GGUF_BLOCKS if fmt not in BLOCK_32]
#: (isa, dot, amx): every way the C kernel can compute a product on some CPU, as far as this one runs it.
VARIANTS = [("generic", "auto", "off"), ("avx2", "maddubs", "off"), ("avx2", "auto", "off"),
            ("avx512", "maddubs", "off"), ("avx512", "auto", "off"), ("avx512", "auto", "emulate")]


@pytest.fixture(params=VARIANTS, ids=["-".join(v) for v in VARIANTS])
def variant(request: pytest.FixtureRequest) -> Iterator[str]:
    """Run the test once per variant; the dot product it names is yielded ("scalar", "vnni512", ...)."""
    isa, dot, amx = request.param
    if not COMPILED or isa not in SUPPORTED_ISAS:
        pytest.skip(f"this CPU or build cannot run the {isa} kernels")
    with pyagent_kernels.using_isa(isa), using_int8(dot=dot, amx=amx):
        name = pyagent_kernels.status()["int8_dot"]
        if dot == "auto" and isa != "generic" and "vnni" not in name:
            pytest.skip(f"this CPU has no VNNI for the {isa} variant")
        yield name


# --- the oracle ----------------------------------------------------------------------------------


def fma32(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """float32 ``a * b + c`` with one rounding: the float64 sum rounded to odd, then to float32."""
    product = a.astype(np.float64) * b.astype(np.float64)  # exact
    addend = np.broadcast_to(c.astype(np.float64), product.shape)
    total = product + addend
    back = total - product
    error = (product - (total - back)) + (addend - back)
    even = (total.view(np.int64) & 1) == 0
    toward = np.nextafter(total, np.where(error > 0, np.inf, -np.inf))
    return np.where((error != 0) & even, toward, total).astype(np.float32)


def q8_0(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Activation blocks of 32: gguf.quants' Q8_0 codes and the float32 scale it rounds to float16."""
    blocks = x.reshape(-1, 32)
    codes = quantize(blocks, GGMLQuantizationType.Q8_0)[:, 2:].copy().view(np.int8)
    scales = np.abs(blocks).max(axis=1) / np.float32(127)
    return scales.reshape(x.shape[0], -1), codes.astype(np.int64).reshape(x.shape[0], -1, 32)


#: Byte offsets of each GGUF block's float16 fields: the scale, then the minimum (Q4_1, Q5_1) or dmin.
SCALES = {"q4_0": (0,), "q4_1": (0, 2), "q5_0": (0,), "q5_1": (0, 2), "q8_0": (0,), "q4_k": (0, 2),
          "q5_k": (0, 2), "q6_k": (208,)}


#: Per K-quant, where its sub-block scales lie in a block and the bytes that make every one 1 (and every
#: minimum 0): Q4_K and Q5_K pack 6-bit scales and minima in 12 bytes, Q6_K has 16 signed bytes.
UNIT_SCALES = {"q4_k": (4, [1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1, 1]), "q5_k": (4, [1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1, 1]),
               "q6_k": (192, [1] * 16)}


def dequantized(blocks: np.ndarray, fmt: str, halves: tuple[float, ...], unit_scales: bool = False) -> np.ndarray:
    """gguf.quants.dequantize of ``blocks`` with their float16 fields set to ``halves`` (and, with
    ``unit_scales``, a K-quant's sub-block scales set to 1): ``[out, nb, weights]``."""
    size, weights = GGUF_BLOCKS[fmt][2], GGUF_BLOCKS[fmt][1]
    changed = blocks.reshape(blocks.shape[0], -1, size).copy()
    for offset, value in zip(SCALES[fmt], halves, strict=True):
        changed[..., offset : offset + 2] = np.array([value], dtype=np.float16).view(np.uint8)
    if unit_scales:
        offset, unit = UNIT_SCALES[fmt]
        changed[..., offset : offset + len(unit)] = np.array(unit, dtype=np.uint8)
    flat = dequantize(changed.reshape(blocks.shape[0], -1), GGMLQuantizationType[fmt.upper()])
    return flat.reshape(blocks.shape[0], -1, weights)


def sub_blocks(blocks: np.ndarray, fmt: str) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """Each sub-block's integer codes ``[out, n, size]`` (signed as the format defines them, from
    gguf's dequantization with unit scales), its scale ``[out, n]`` (float32: the float16 d times the
    sub-block's integer scale, exact) and minimum ``[out, n]`` (Q4_1, Q5_1: m; Q4_K, Q5_K: -(dmin *
    m); else None); the sub-blocks of a 32-weight format are its blocks."""
    out = blocks.shape[0]
    size = GGUF_BLOCKS[fmt][2]
    per_block = blocks.reshape(out, -1, size)
    d = half(blocks, fmt, 0)
    if fmt not in K_QUANTS:
        codes = dequantized(blocks, fmt, (1.0, 0.0)[: len(SCALES[fmt])]).astype(np.int64)
        return codes, d, half(blocks, fmt, 1) if fmt in ("q4_1", "q5_1") else None
    codes = dequantized(blocks, fmt, (1.0, 0.0)[: len(SCALES[fmt])], unit_scales=True).astype(np.int64)
    if fmt == "q6_k":
        scales = per_block[..., 192:208].copy().view(np.int8).astype(np.float32)  # [out, nb, 16]
        return codes.reshape(out, -1, 16), (d[..., None] * scales).reshape(out, -1), None
    scales, minima = Q4_K.get_scale_min(per_block[..., 4:16].reshape(-1, 12))
    scales, minima = (v.reshape(out, -1, 8).astype(np.float32) for v in (scales, minima))
    dmin = half(blocks, fmt, 1)
    return (codes.reshape(out, -1, 32), (d[..., None] * scales).reshape(out, -1),
            (-(dmin[..., None] * minima)).reshape(out, -1))


def half(blocks: np.ndarray, fmt: str, which: int) -> np.ndarray:
    """The float16 field ``which`` (0: scale, 1: minimum or dmin) of every block, as float32 ``[out, nb]``."""
    size, offset = GGUF_BLOCKS[fmt][2], SCALES[fmt][which]
    per_block = blocks.reshape(blocks.shape[0], -1, size)
    return per_block[..., offset : offset + 2].copy().view(np.float16).astype(np.float32)[..., 0]


def oracle(x: np.ndarray, blocks: np.ndarray, fmt: str) -> np.ndarray:
    """float32 ``x [rows, in] @ W.T`` by the documented order, W the GGUF rows ``blocks``."""
    ad, aq = q8_0(x)
    ds = ad * aq.sum(-1).astype(np.float32)
    codes, scales, minima = sub_blocks(blocks, fmt)
    size = codes.shape[-1]
    acts = aq.reshape(x.shape[0], -1, size)
    y = np.zeros((x.shape[0], blocks.shape[0]), dtype=np.float32)
    for j in range(codes.shape[1]):  # every sub-block in turn
        block = j * size // 32  # its activation block
        sums = acts[:, j] @ codes[:, j].T  # exact integers
        y = fma32(scales[None, :, j] * ad[:, block, None], sums.astype(np.float32), y)
        if minima is not None:
            y = fma32(np.broadcast_to(minima[None, :, j], y.shape), np.broadcast_to(ds[:, block, None], y.shape), y)
    return y


def activations(rows: int, inner: int, seed: int) -> torch.Tensor:
    """Random rows with a few edge cases: a zero block, and a block whose largest magnitude occurs with
    both signs."""
    x = torch.randn(rows, inner, generator=torch.Generator().manual_seed(seed)) * 3
    x[0, :32] = 0
    if rows > 1:
        x[1, 8], x[1, 9] = 9.5, -9.5
    return x


# --- the product ---------------------------------------------------------------------------------

SHAPES_32 = [(1, 1, 32), (1, 37, 96), (3, 16, 64), (5, 50, 160), (17, 33, 96), (20, 17, 64), (33, 70, 320)]
SHAPES_K = [(1, 7, 256), (2, 20, 512), (17, 18, 256), (40, 33, 512)]
PRODUCTS = [(fmt, *shape) for fmt in GGUF_BLOCKS for shape in (SHAPES_32 if fmt in BLOCK_32 else SHAPES_K)]


def weight(fmt: str, out: int, inner: int, seed: int) -> tuple[QuantizedWeight, np.ndarray]:
    blocks = gguf_blocks(fmt, out, inner, seed)
    return QuantizedWeight.from_gguf(torch.from_numpy(blocks), fmt, inner), blocks


@pytest.mark.parametrize(("fmt", "rows", "out", "inner"), PRODUCTS)
def test_product_follows_the_documented_order(variant: str, fmt: str, rows: int, out: int, inner: int) -> None:
    quantized, blocks = weight(fmt, out, inner, seed=rows * out + inner)
    x = activations(rows, inner, seed=inner)
    expected = oracle(x.numpy(), blocks, fmt)
    got = linear(x, quantized, out_dtype=torch.float32, backend="c", precision="int8")
    np.testing.assert_array_equal(got.numpy(), expected, err_msg=f"{variant} {fmt}")
    narrow = x.to(torch.bfloat16)
    got = linear(narrow, quantized, backend="c", precision="int8")
    assert got.dtype == torch.bfloat16
    np.testing.assert_array_equal(got.float().numpy(), torch.from_numpy(oracle(narrow.float().numpy(), blocks, fmt))
                                  .to(torch.bfloat16).float().numpy())


@pytest.mark.parametrize(("fmt", "rows", "out", "inner"), [p for p in PRODUCTS if p[1] <= 20])
def test_torch_fallback_gives_the_same_bits(fmt: str, rows: int, out: int, inner: int) -> None:
    quantized, blocks = weight(fmt, out, inner, seed=rows + out)
    x = activations(rows, inner, seed=out)
    got = linear(x, quantized, backend="torch", precision="int8")
    np.testing.assert_array_equal(got.numpy(), oracle(x.numpy(), blocks, fmt))


@needs_c
@settings(max_examples=25, deadline=None)
@given(rows=st.integers(1, 40), out=st.integers(1, 70), blocks=st.integers(1, 3), threads=st.integers(1, 3),
       fmt=st.sampled_from(sorted(GGUF_BLOCKS)), seed=st.integers(0, 2**16),
       variant=st.sampled_from([v for v in VARIANTS if v[0] in SUPPORTED_ISAS]))
def test_each_row_is_the_same_alone_or_batched(rows: int, out: int, blocks: int, threads: int, fmt: str, seed: int,
                                              variant: tuple[str, str, str]) -> None:
    inner = GGUF_BLOCKS[fmt][1] * blocks
    quantized, _ = weight(fmt, out, inner, seed)
    x = activations(rows, inner, seed)
    isa, dot, amx = variant
    with pyagent_kernels.using_isa(isa), using_int8(dot=dot, amx=amx):
        batched = linear(x, quantized, threads=threads, backend="c", precision="int8")
        for row in range(rows):
            alone = linear(x[row : row + 1], quantized, threads=1, backend="c", precision="int8")
            assert torch.equal(batched[row], alone[0]), row


@needs_c
@pytest.mark.parametrize("parts", [("q5_0", "q5_0", "q8_0"), ("q4_k", "q4_k", "q6_k"), ("q4_1", "q6_k", "q8_0")])
def test_a_stack_of_formats_is_each_part_side_by_side(parts: tuple[str, ...]) -> None:
    """A weight stacked from parts of different formats (a Q4_K_M file's q/k/v) keeps each part's
    blocks; the product is each part's, side by side, whether or not an exact layout holds them all."""
    inner = 256
    pieces = [weight(fmt, 16 + 3 * i, inner, seed=i) for i, fmt in enumerate(parts)]
    stacked = QuantizedWeight.cat([w for w, _ in pieces])
    runs = [fmt for i, fmt in enumerate(parts) if i == 0 or parts[i - 1] != fmt]
    assert [fmt for fmt, _, _ in stacked.int8_parts()] == runs
    x = activations(3, inner, seed=5)
    expected = np.concatenate([oracle(x.numpy(), blocks, fmt) for (_, blocks), fmt in zip(pieces, parts, strict=True)],
                              axis=1)
    np.testing.assert_array_equal(linear(x, stacked, backend="c", precision="int8").numpy(), expected)
    out = torch.empty(3, stacked.shape[0])
    run_prepared([prepare_linear(x, stacked, out, threads=2, precision="int8")])
    np.testing.assert_array_equal(out.numpy(), expected)
    assert torch.equal(stacked.dequantize(), torch.cat([w.dequantize() for w, _ in pieces]))


# --- the activations -----------------------------------------------------------------------------


@needs_c
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_activation_blocks_are_llama_cpp_s(c_isa: str, dtype: torch.dtype) -> None:
    """pak_int8_quantize gives the oracle's codes and scales, and the sums of the codes it documents
    (the portable quantizer and AVX-512's)."""
    ffi, lib = load().ffi, load().lib
    x = activations(6, 512, seed=7).to(dtype)
    count = 6 * 512 // 32
    out = ffi.new("pak_int8_act32[]", count)
    assert lib.pak_int8_quantize(ffi.cast("void *", x.data_ptr()), dtype == torch.bfloat16, 6, 512, out) == 0
    scales, codes = q8_0(x.float().numpy())
    np.testing.assert_array_equal(np.array([list(out[i].q) for i in range(count)]).reshape(codes.shape), codes)
    np.testing.assert_array_equal(np.array([out[i].d for i in range(count)], dtype=np.float32), scales.ravel())
    flat = codes.reshape(count, 32)
    assert [out[i].s for i in range(count)] == flat.sum(-1).tolist()
    assert [list(out[i].half) for i in range(count)] == flat.reshape(count, 2, 16).sum(-1).tolist()
    products = scales.ravel() * flat.sum(-1).astype(np.float32)
    np.testing.assert_array_equal(np.array([out[i].ds for i in range(count)], dtype=np.float32), products)


# --- the layout ----------------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", GGUF_BLOCKS)
@pytest.mark.parametrize("out", [16, 37])
def test_layout_holds_the_file_s_bytes(fmt: str, out: int) -> None:
    """Groups of 16 rows hold 16 GGUF rows' bytes (no more: a whole number of groups reads exactly the
    file's tensor bytes), and interleaving is undone exactly."""
    inner = 2 * GGUF_BLOCKS[fmt][1]
    blocks = torch.from_numpy(gguf_blocks(fmt, out, inner, seed=out))
    groups = interleave(blocks, fmt)
    assert groups.shape == (-(-out // GROUP_ROWS), group_bytes(fmt, inner))
    assert group_bytes(fmt, inner) == GROUP_ROWS * blocks.shape[1]
    if out % GROUP_ROWS == 0:
        assert groups.numel() == blocks.numel()
    assert torch.equal(deinterleave(groups, fmt, out), blocks)
    if COMPILED:
        assert load().lib.pak_int8_group_bytes(GGUF_BLOCKS[fmt][0], inner) == group_bytes(fmt, inner)


# --- choices and errors --------------------------------------------------------------------------


def test_quantized_weights_default_to_int8_and_exact_is_the_dequantized_product() -> None:
    quantized, blocks = weight("q4_1", 20, 64, seed=1)
    x = activations(2, 64, seed=1)
    assert torch.equal(linear(x, quantized), linear(x, quantized, precision="int8"))
    dense = torch.from_numpy(dequantize(blocks, GGMLQuantizationType.Q4_1).reshape(20, 64).copy())
    assert torch.equal(linear(x, quantized, precision="exact"), linear(x, dense))


def test_bad_precision_and_unrecoverable_blocks_are_refused() -> None:
    quantized, _ = weight("q4_k", 4, 256, seed=2)
    x = activations(1, 256, seed=2)
    with pytest.raises(KernelArgumentError, match="precision='fast' is not one of exact, int8"):
        linear(x, quantized, precision="fast")  # type: ignore[arg-type]
    split = QuantizedWeight(quantized.packed, "q4_k", 256)  # the exact layout's split blocks
    with pytest.raises(KernelArgumentError, match=r"QuantizedWeight\.from_gguf"):
        linear(x, split, precision="int8")
    assert torch.equal(linear(x, split, precision="exact"), linear(x, quantized, precision="exact"))
    original = weight("q8_0", 4, 64, seed=3)[0]
    rebuilt = QuantizedWeight(original.packed, "q8_0", 64)  # float16 scales: the GGUF blocks are recovered
    assert torch.equal(linear(activations(1, 64, 3), rebuilt), linear(activations(1, 64, 3), original))


@needs_c
def test_knobs_are_checked() -> None:
    with pytest.raises(KernelArgumentError, match="unknown int8 dot product 'sse'"):
        pyagent_kernels.set_int8_dot("sse")
    with pytest.raises(KernelArgumentError, match="unknown AMX mode 'on'"):
        pyagent_kernels.set_amx("on")
    previous = pyagent_kernels.set_int8_dot("maddubs")
    assert pyagent_kernels.set_int8_dot(previous) == "maddubs"
