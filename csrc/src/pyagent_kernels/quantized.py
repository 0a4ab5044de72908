"""Weight matrices kept in a GGUF block-quantized format, for :func:`pyagent_kernels.linear.linear`.

A :class:`QuantizedWeight` holds a llama.cpp tensor in its block format (Q4_0, Q4_1, Q5_0, Q5_1,
Q8_0, Q4_K, Q5_K or Q6_K) instead of a dense float matrix: 5 to 10 bits per weight rather than 16 or
32, so a memory-bound decode step reads 1.6 to 6 times fewer bytes. The kernel reads blocks of 32
weights with float32 scales (the layouts of ``include/pyagent/linear.h``): a GGUF file's 32-weight
blocks have their float16 scales widened (exact), and the K-quants' super-blocks of 256 weights are
split into 32-weight blocks with each sub-block's scale and minimum multiplied out (exact too: the
products of a float16 and a 6- or 8-bit integer fit float32's 24 bits). Q4_K becomes Q4_1 blocks,
Q5_K Q5_1 blocks, and Q6_K signed-byte blocks with a scale per 16 weights. The linear kernel decodes
them as it goes into exactly the float32 values that the ``gguf`` package's dequantization gives
(bfloat16: those values rounded to nearest), so a product with a quantized weight has the bits of
the same product with :meth:`QuantizedWeight.dequantize`'s matrix.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import torch

from pyagent_kernels.errors import KernelArgumentError

__all__ = ["BLOCK_SIZE", "FORMATS", "BlockFormat", "QuantizedWeight", "shared_format"]

#: Weights per block of the kernel's layouts.
BLOCK_SIZE = 32


class BlockFormat(NamedTuple):
    """A GGUF block format and the kernel layout its rows are repacked into.

    Attributes:
        ggml_type: the GGML type id of the format in a GGUF file.
        gguf_weights: weights per GGUF block (32, or 256 for a K-quant's super-block).
        gguf_bytes: bytes per GGUF block.
        layout: the kernel layout (``pak_weight_type`` of ``include/pyagent/linear.h``): a GGML type id.
        layout_bytes: bytes per block of 32 weights in that layout.
    """

    ggml_type: int
    gguf_weights: int
    gguf_bytes: int
    layout: int
    layout_bytes: int


#: Format name -> its :class:`BlockFormat`.
FORMATS: dict[str, BlockFormat] = {
    "q4_0": BlockFormat(2, 32, 18, 2, 20),
    "q4_1": BlockFormat(3, 32, 20, 3, 24),
    "q5_0": BlockFormat(6, 32, 22, 6, 24),
    "q5_1": BlockFormat(7, 32, 24, 7, 28),
    "q8_0": BlockFormat(8, 32, 34, 8, 36),
    "q4_k": BlockFormat(12, 256, 144, 3, 24),
    "q5_k": BlockFormat(13, 256, 176, 7, 28),
    "q6_k": BlockFormat(14, 256, 210, 14, 40),
}


class _Layout(NamedTuple):
    """A kernel layout: weight = code * scale (+ minimum), codes in [low, high]; 4- and 5-bit codes
    are stored minus ``low``, signed bytes as they are."""

    name: str  # the format whose own layout it is
    scales: int  # float32 scales per block: one, or one per 16 weights
    has_min: bool
    bits: int  # 4, 5 or 8 (signed bytes)
    low: int
    high: int


_LAYOUTS = {
    2: _Layout("q4_0", 1, False, 4, -8, 7),
    6: _Layout("q5_0", 1, False, 5, -16, 15),
    3: _Layout("q4_1", 1, True, 4, 0, 15),
    7: _Layout("q5_1", 1, True, 5, 0, 31),
    8: _Layout("q8_0", 1, False, 8, -128, 127),
    14: _Layout("q6_k", 2, False, 8, -128, 127),
}


class _Blocks(NamedTuple):
    """Rows as blocks of 32 weights: weight ``j`` = ``codes[..., j] * scale[..., j // 16] (+ minimum)``."""

    scale: torch.Tensor  # float32 [rows, blocks, 2]
    minimum: torch.Tensor | None  # float32 [rows, blocks, 1]
    codes: torch.Tensor  # int16 [rows, blocks, 32]


class QuantizedWeight:
    """A ``[out, in]`` weight matrix stored in a block-quantized format.

    Build one from a GGUF tensor's bytes with :meth:`from_gguf`; the constructor takes rows already
    in the kernel's layout (:attr:`packed` of another weight, or a checkpoint that stored them).

    Args:
        packed: ``uint8 [out, in / 32 * layout bytes]``: each row's blocks in the kernel's layout.
        fmt: a name of :data:`FORMATS`.
        in_features: ``in``, a multiple of 32.

    Raises:
        KernelArgumentError: an unknown format, or rows whose dtype, layout or size does not fit
            ``in_features`` weights per row.
    """

    def __init__(self, packed: torch.Tensor, fmt: str, in_features: int) -> None:
        _check_rows(packed, fmt, in_features, gguf=False)
        self.packed = packed
        self.format = fmt
        self.in_features = in_features
        self.shape: tuple[int, int] = (packed.shape[0], in_features)
        """``(out, in)``, the shape of the dense matrix."""
        self.type_id: int = FORMATS[fmt].layout
        """The kernel layout of :attr:`packed` (the kernel's ``wtype``: a GGML type id)."""

    @classmethod
    def from_gguf(cls, blocks: torch.Tensor, fmt: str, in_features: int) -> QuantizedWeight:
        """The weight whose rows a GGUF file stores as ``blocks`` (``uint8 [out, row bytes]``)."""
        _check_rows(blocks, fmt, in_features, gguf=True)
        spec = FORMATS[fmt]
        per_block = blocks.reshape(blocks.shape[0], -1, spec.gguf_bytes)
        if spec.gguf_weights == BLOCK_SIZE:  # the same layout with float32 scales
            halves = (spec.layout_bytes - spec.gguf_bytes) // 2
            wide = per_block[..., : 2 * halves].contiguous().view(torch.float16).float().view(torch.uint8)
            packed = torch.cat((wide, per_block[..., 2 * halves :]), dim=-1)
        else:
            packed = _pack(_K_QUANT_READERS[fmt](per_block), spec.layout)
        return cls(packed.reshape(blocks.shape[0], -1).contiguous(), fmt, in_features)

    def __repr__(self) -> str:
        return f"QuantizedWeight({self.format}, shape={list(self.shape)})"

    @classmethod
    def cat(cls, parts: Sequence[QuantizedWeight]) -> QuantizedWeight:
        """The rows of ``parts`` stacked (one ``in`` for all). Parts of different formats are first
        repacked, exactly, into the smallest layout that holds all of them (:func:`shared_format`)."""
        if not parts:
            raise KernelArgumentError("QuantizedWeight.cat needs at least one part")
        fmt = shared_format(parts)
        if fmt is None:
            first = parts[0]
            other = next(p for p in parts if (p.format, p.in_features) != (first.format, first.in_features))
            raise KernelArgumentError(
                f"cannot stack {other.format} rows of {other.in_features} weights onto {first.format} rows of "
                f"{first.in_features}: no block layout holds both exactly; dequantize them"
            )
        layout = FORMATS[fmt].layout
        packed = [p.packed if p.type_id == layout else _pack(_unpack(p.packed, p.type_id), layout).reshape(
            p.shape[0], -1) for p in parts]
        names = {p.format for p in parts}
        return cls(torch.cat(packed), names.pop() if len(names) == 1 else fmt, parts[0].in_features)

    def rows(self, index: torch.Tensor, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """The dense rows ``index`` (an embedding lookup), in ``dtype``."""
        return _dequantize(self.packed[index], self.type_id).to(dtype)

    def dequantize(self, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """The dense ``[out, in]`` matrix in ``dtype``: the gguf package's float32 values, then rounded."""
        return _dequantize(self.packed, self.type_id).to(dtype)


def shared_format(parts: Sequence[QuantizedWeight]) -> str | None:
    """The format :meth:`QuantizedWeight.cat` stacks ``parts`` in: theirs if they share one, else the
    layout with the fewest bytes that holds every part's values exactly (Q4_0 and Q5_0 codes fit
    Q8_0's signed bytes, Q4_1's fit Q5_1's, Q8_0 blocks are Q6_K blocks with equal scales); ``None``
    when there is none or the parts differ in ``in``."""
    if not parts or len({p.in_features for p in parts}) != 1:
        return None
    if len({p.format for p in parts}) == 1:
        return parts[0].format
    needs = [_LAYOUTS[p.type_id] for p in parts]
    fits = [(FORMATS[layout.name].layout_bytes, layout.name) for layout in _LAYOUTS.values()
            if all(n.has_min == layout.has_min and layout.low <= n.low and n.high <= layout.high
                   and n.scales <= layout.scales for n in needs)]
    return min(fits)[1] if fits else None


def _check_rows(rows: torch.Tensor, fmt: str, in_features: int, *, gguf: bool) -> None:
    """Raise :class:`KernelArgumentError` unless ``rows`` can hold ``in_features`` weights of ``fmt``
    per row, in the GGUF file's blocks or (``gguf`` false) the kernel's layout."""
    if fmt not in FORMATS:
        raise KernelArgumentError(f"unknown quantized format {fmt!r}; supported: {', '.join(FORMATS)}")
    spec = FORMATS[fmt]
    per_block = spec.gguf_weights if gguf else BLOCK_SIZE
    if in_features <= 0 or in_features % per_block:
        raise KernelArgumentError(
            f"a {fmt} row holds whole blocks of {per_block} weights; in_features={in_features} is not a "
            "positive multiple of it"
        )
    row_bytes = in_features // per_block * (spec.gguf_bytes if gguf else spec.layout_bytes)
    what = "GGUF" if gguf else "packed"
    if rows.dtype != torch.uint8 or rows.dim() != 2 or rows.shape[1] != row_bytes:
        raise KernelArgumentError(
            f"{what} {fmt} rows of {in_features} weights must be uint8 [out, {row_bytes}]; "
            f"got {rows.dtype} {list(rows.shape)}"
        )
    if rows.device.type != "cpu" or not rows.is_contiguous():
        raise KernelArgumentError(f"{what} {fmt} rows must be a contiguous CPU tensor; pass rows.contiguous()")


# --- the kernel layouts ------------------------------------------------------------------------


def _float32(raw: torch.Tensor) -> torch.Tensor:
    """float32 values from their bytes along the last dimension (a multiple of 4)."""
    return raw.contiguous().view(torch.float32)


def _bytes(values: torch.Tensor) -> torch.Tensor:
    """The bytes of float32 ``values [..., n]`` as ``uint8 [..., 4n]`` (any strides)."""
    return values.contiguous().reshape(-1).view(torch.uint8).reshape(*values.shape[:-1], -1)


def _nibbles(packed: torch.Tensor) -> torch.Tensor:
    """32 codes from 16 bytes: byte j's low half is code j, its high half code j + 16."""
    return torch.cat((packed & 0xF, packed >> 4), dim=-1)


def _bits(word: torch.Tensor, count: int) -> torch.Tensor:
    """Bits 0..count-1 of little-endian bytes ``word [..., count / 8]`` as ``uint8 [..., count]``."""
    shifts = torch.arange(8, dtype=torch.uint8)
    return ((word.unsqueeze(-1) >> shifts) & 1).flatten(-2)[..., :count]


def _unpack(packed: torch.Tensor, layout: int) -> _Blocks:
    """The scales, minima and codes of rows in kernel ``layout``."""
    spec = _LAYOUTS[layout]
    per_block = packed.reshape(packed.shape[0], -1, FORMATS[spec.name].layout_bytes)
    scale = _float32(per_block[..., : 4 * spec.scales]).expand(-1, -1, 2)
    start = 4 * spec.scales + 4 * spec.has_min
    minimum = _float32(per_block[..., 4:8]) if spec.has_min else None
    if spec.bits == 8:
        codes = per_block[..., start:].contiguous().view(torch.int8).to(torch.int16)
    else:
        if spec.bits == 5:
            high, start = _bits(per_block[..., start : start + 4], 32), start + 4
        codes = _nibbles(per_block[..., start:]).to(torch.int16)
        if spec.bits == 5:
            codes |= high.to(torch.int16) << 4
        codes += spec.low
    return _Blocks(scale, minimum, codes)


def _pack(blocks: _Blocks, layout: int) -> torch.Tensor:
    """``blocks`` in kernel ``layout`` (values the layout holds exactly): ``uint8 [rows, blocks, bytes]``."""
    spec = _LAYOUTS[layout]
    parts = [_bytes(blocks.scale[..., : spec.scales])]
    if spec.has_min:
        assert blocks.minimum is not None
        parts.append(_bytes(blocks.minimum))
    if spec.bits == 8:
        parts.append(blocks.codes.to(torch.int8).view(torch.uint8))
    else:
        unsigned = (blocks.codes - spec.low).to(torch.uint8)
        if spec.bits == 5:
            weights = torch.tensor([1 << k for k in range(8)], dtype=torch.uint8)
            high = (unsigned >> 4).reshape(*unsigned.shape[:-1], 4, 8)
            parts.append((high * weights).sum(-1, dtype=torch.uint8))
        low = unsigned & 0xF
        parts.append(low[..., :16] | (low[..., 16:] << 4))
    return torch.cat(parts, dim=-1)


def _dequantize(packed: torch.Tensor, layout: int) -> torch.Tensor:
    """float32 ``[rows, in]`` from rows in kernel ``layout``: one rounding per multiply and per add."""
    blocks = _unpack(packed, layout)
    scale = blocks.scale.repeat_interleave(BLOCK_SIZE // 2, dim=-1)
    values = blocks.codes.float() * scale
    if blocks.minimum is not None:
        values = values + blocks.minimum
    return values.reshape(packed.shape[0], -1)


# --- the K-quants' super-blocks ------------------------------------------------------------------


def _scale_min_k4(blocks: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The 8 six-bit scales and minima of Q4_K/Q5_K super-blocks (bytes 4..15), as float32 ``[.., 8]``.

    Bytes 0..3 hold scales 0..3 in their low 6 bits, 4..7 minima 0..3; bytes 8..11 hold the low 4
    bits of scales 4..7 (low half) and of minima 4..7 (high half), whose top 2 bits are the top bits
    of bytes 0..3 (scales) and 4..7 (minima).
    """
    packed = blocks[..., 4:16]
    first, second, third = packed[..., 0:4], packed[..., 4:8], packed[..., 8:12]
    scales = torch.cat((first & 63, (third & 0xF) | ((first >> 6) << 4)), dim=-1)
    minima = torch.cat((second & 63, (third >> 4) | ((second >> 6) << 4)), dim=-1)
    return scales.float(), minima.float()


def _half(blocks: torch.Tensor, offset: int) -> torch.Tensor:
    """The float16 at byte ``offset`` of each block, as float32 ``[..., 1]``."""
    return blocks[..., offset : offset + 2].contiguous().view(torch.float16).float()


def _read_q4_k_like(blocks: torch.Tensor, high: torch.Tensor | None) -> _Blocks:
    """Q4_K (``high`` None) or Q5_K super-blocks ``[rows, n, bytes]`` as 8 blocks of 32 each.

    Sub-block i's weight l: the low (i even) or high half of byte 32 * (i // 2) + l of the 128 code
    bytes, plus (Q5_K) bit i of byte l of the 32 high-bit bytes, times 16; its weight is
    ``d * scale[i] * code - dmin * min[i]``.
    """
    rows, count = blocks.shape[:2]
    scales, minima = _scale_min_k4(blocks)
    codes = blocks[..., -128:].reshape(rows, count, 4, 1, 32) >> torch.tensor([0, 4], dtype=torch.uint8).reshape(2, 1)
    codes = (codes & 0xF).reshape(rows, count * 8, 32).to(torch.int16)
    if high is not None:
        bits = (high.reshape(rows, count, 1, 32) >> torch.arange(8, dtype=torch.uint8).reshape(8, 1)) & 1
        codes |= bits.reshape(rows, count * 8, 32).to(torch.int16) << 4
    scale = (_half(blocks, 0) * scales).reshape(rows, count * 8, 1).expand(-1, -1, 2)
    minimum = -(_half(blocks, 2) * minima).reshape(rows, count * 8, 1)
    return _Blocks(scale, minimum, codes)


def _read_q6_k(blocks: torch.Tensor) -> _Blocks:
    """Q6_K super-blocks ``[rows, n, 210]`` as 8 blocks of 32 each: codes from 128 bytes of low halves
    and 64 bytes of 2-bit high parts, minus 32, 16 signed scales (one per 16 weights) times d."""
    rows, count = blocks.shape[:2]
    low = blocks[..., :128].reshape(rows, count, 2, 1, 64) >> torch.tensor([0, 4], dtype=torch.uint8).reshape(2, 1)
    high = blocks[..., 128:192].reshape(rows, count, 2, 1, 32) >> torch.tensor(
        [0, 2, 4, 6], dtype=torch.uint8).reshape(4, 1)
    codes = (low & 0xF).reshape(rows, count * 8, 32).to(torch.int16)
    codes |= (high & 3).reshape(rows, count * 8, 32).to(torch.int16) << 4
    scales = blocks[..., 192:208].contiguous().view(torch.int8).float()
    return _Blocks((_half(blocks, 208) * scales).reshape(rows, count * 8, 2), None, codes - 32)


_K_QUANT_READERS = {
    "q4_k": lambda blocks: _read_q4_k_like(blocks, None),
    "q5_k": lambda blocks: _read_q4_k_like(blocks, blocks[..., 16:48]),
    "q6_k": _read_q6_k,
}
