"""Weight matrices kept in a GGUF block-quantized format, for :func:`pyagent_kernels.linear.linear`.

A :class:`QuantizedWeight` holds a llama.cpp tensor in its block format (Q4_0, Q4_1, Q5_0, Q5_1,
Q8_0, Q4_K, Q5_K or Q6_K) instead of a dense float matrix: 4.5 to 8.5 bits per weight rather than 16
or 32, so a memory-bound decode step reads 2 to 7 times fewer bytes. Built from a GGUF file
(:meth:`QuantizedWeight.from_gguf`), it keeps the file's blocks, and each precision of the linear
kernel reads its own layout of them, built when first used:

- "int8" (:meth:`QuantizedWeight.int8_parts`): the blocks themselves, interleaved 16 rows at a time
  (``include/pyagent/linear_int8.h``): the file's bytes, no more.
- "exact" (:attr:`QuantizedWeight.packed`): blocks of 32 weights with float32 scales (the layouts of
  ``include/pyagent/linear.h``): a GGUF file's 32-weight blocks have their float16 scales widened
  (exact), and the K-quants' super-blocks of 256 weights are split into 32-weight blocks with each
  sub-block's scale and minimum multiplied out (exact too: the products of a float16 and a 6- or
  8-bit integer fit float32's 24 bits). Q4_K becomes Q4_1 blocks, Q5_K Q5_1 blocks, and Q6_K
  signed-byte blocks with a scale per 16 weights. The linear kernel decodes them as it goes into
  exactly the float32 values that the ``gguf`` package's dequantization gives (bfloat16: those values
  rounded to nearest), so a product with a quantized weight has the bits of the same product with
  :meth:`QuantizedWeight.dequantize`'s matrix.

A weight stacked from parts of different formats (:meth:`QuantizedWeight.cat`: a Q4_K_M file's
Q5_0 query and key with its Q8_0 value projection) keeps each part's blocks for the int8 product;
its exact layout is the smallest that holds every part exactly, if there is one.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import torch

from pyagent_kernels._int8_layout import interleave
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

    Build one from a GGUF tensor's bytes with :meth:`from_gguf`, which keeps the file's blocks; the
    constructor takes rows already in the exact product's layout (:attr:`packed` of another weight,
    or a checkpoint that stored them). Products run in one of two precisions (``precision`` of
    :func:`pyagent_kernels.linear.linear`): "exact" reads :attr:`packed` and gives the bits of the
    dequantized matrix's product; "int8" reads the GGUF blocks, interleaved 16 rows at a time
    (:meth:`int8_parts`), and multiplies int8-quantized activations as llama.cpp does.

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
        self._packed: torch.Tensor | None = packed
        self._gguf = _gguf_from_packed(packed, fmt)
        self._int8: tuple[tuple[str, torch.Tensor, int], ...] | None = None
        self.format = fmt
        """The format of :attr:`packed` (for a stack of parts in several formats, their shared layout's)."""
        self.in_features = in_features
        self.shape: tuple[int, int] = (packed.shape[0], in_features)
        """``(out, in)``, the shape of the dense matrix."""

    @classmethod
    def from_gguf(cls, blocks: torch.Tensor, fmt: str, in_features: int) -> QuantizedWeight:
        """The weight whose rows a GGUF file stores as ``blocks`` (``uint8 [out, row bytes]``), kept as they are."""
        _check_rows(blocks, fmt, in_features, gguf=True)
        return cls._of_parts(((fmt, blocks.contiguous()),), in_features)

    @classmethod
    def _of_parts(cls, parts: tuple[tuple[str, torch.Tensor], ...], in_features: int) -> QuantizedWeight:
        """A weight of GGUF rows in one or more formats, stacked (the exact layout built when first read)."""
        weight = cls.__new__(cls)
        weight._packed = None
        weight._gguf = parts
        weight._int8 = None
        formats = list(dict.fromkeys(fmt for fmt, _ in parts))
        weight.format = formats[0] if len(formats) == 1 else _shared_layout(formats) or "+".join(formats)
        weight.in_features = in_features
        weight.shape = (sum(blocks.shape[0] for _, blocks in parts), in_features)
        return weight

    def __repr__(self) -> str:
        return f"QuantizedWeight({self.format}, shape={list(self.shape)})"

    @property
    def packed(self) -> torch.Tensor:
        """``uint8 [out, in / 32 * layout bytes]``: the rows in the exact product's layout (built from the
        GGUF blocks when first read)."""
        if self._packed is None:
            assert self._gguf is not None
            if self.format not in FORMATS:
                raise KernelArgumentError(
                    f"the parts of this weight ({self.format}) share no block layout, which precision='exact' "
                    "needs; use precision='int8' or dequantize them"
                )
            layout = FORMATS[self.format].layout
            self._packed = torch.cat([_layout_rows(blocks, fmt, layout, self.in_features)
                                      for fmt, blocks in self._gguf])
        return self._packed

    @property
    def type_id(self) -> int:
        """The kernel layout of :attr:`packed` (the exact kernel's ``wtype``: a GGML type id)."""
        if self.format not in FORMATS:
            raise KernelArgumentError(f"the parts of this weight ({self.format}) share no block layout")
        return FORMATS[self.format].layout

    @property
    def gguf_parts(self) -> tuple[tuple[str, torch.Tensor], ...] | None:
        """The GGUF rows (format, ``uint8 [rows, row bytes]``) stacked in this weight, or None when it
        was built from rows of the exact layout that no GGUF block holds (K-quants' split blocks)."""
        return self._gguf

    def int8_parts(self) -> tuple[tuple[str, torch.Tensor, int], ...]:
        """The rows in the int8 product's layout: per part, its format, its groups ``uint8 [ceil(rows /
        16), group bytes]`` and its number of rows; built from the GGUF blocks when first asked.

        Raises:
            KernelArgumentError: the weight was built from exact-layout rows of a K-quant, whose GGUF
                blocks cannot be recovered.
        """
        if self._int8 is None:
            if self._gguf is None:
                raise KernelArgumentError(
                    f"this {self.format} weight was built from the exact layout's rows, which do not keep the "
                    "GGUF super-blocks precision='int8' reads; build it with QuantizedWeight.from_gguf"
                )
            self._int8 = tuple((fmt, interleave(blocks, fmt), blocks.shape[0]) for fmt, blocks in self._gguf)
        return self._int8

    @classmethod
    def cat(cls, parts: Sequence[QuantizedWeight]) -> QuantizedWeight:
        """The rows of ``parts`` stacked (one ``in`` for all). Parts of one format are stacked as they
        are; parts of different formats keep their GGUF blocks side by side for the int8 product, and
        their exact layout is the smallest that holds all of them exactly (:func:`shared_format`)."""
        if not parts:
            raise KernelArgumentError("QuantizedWeight.cat needs at least one part")
        first = parts[0]
        other = next((p for p in parts if p.in_features != first.in_features), None)
        if other is not None:
            raise KernelArgumentError(
                f"cannot stack rows of {other.in_features} weights onto rows of {first.in_features}: the parts "
                "of a stacked weight share `in`"
            )
        gguf = [p.gguf_parts for p in parts]
        if all(g is not None for g in gguf):
            return cls._of_parts(_merged([item for g in gguf if g is not None for item in g]), first.in_features)
        fmt = shared_format(parts)
        if fmt is None:
            other = next(p for p in parts if p.format != first.format)
            raise KernelArgumentError(
                f"cannot stack {other.format} rows of {other.in_features} weights onto {first.format} rows of "
                f"{first.in_features}: no block layout holds both exactly; dequantize them"
            )
        layout = FORMATS[fmt].layout
        packed = [p.packed if p.type_id == layout else _pack(_unpack(p.packed, p.type_id), layout).reshape(
            p.shape[0], -1) for p in parts]
        names = {p.format for p in parts}
        return cls(torch.cat(packed), names.pop() if len(names) == 1 else fmt, first.in_features)

    def rows(self, index: torch.Tensor, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """The dense rows ``index`` (an embedding lookup), in ``dtype``."""
        if self._packed is not None:
            return _dequantize(self.packed[index], self.type_id).to(dtype)
        assert self._gguf is not None
        if len(self._gguf) > 1:
            return self.dequantize(dtype)[index]
        fmt, blocks = self._gguf[0]
        if FORMATS[fmt].gguf_weights == BLOCK_SIZE:
            return _gguf_rows32(blocks[index], fmt).to(dtype)
        layout = FORMATS[fmt].layout
        return _dequantize(_layout_rows(blocks[index], fmt, layout, self.in_features), layout).to(dtype)

    def dequantize(self, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """The dense ``[out, in]`` matrix in ``dtype``: the gguf package's float32 values, then rounded."""
        if self._packed is None and self._gguf is not None:
            return torch.cat([_dequantize(_layout_rows(blocks, fmt, FORMATS[fmt].layout, self.in_features),
                                          FORMATS[fmt].layout) for fmt, blocks in self._gguf]).to(dtype)
        return _dequantize(self.packed, self.type_id).to(dtype)


def _merged(parts: list[tuple[str, torch.Tensor]]) -> tuple[tuple[str, torch.Tensor], ...]:
    """``parts`` with neighbours of one format stacked into one."""
    merged: list[tuple[str, torch.Tensor]] = []
    for fmt, blocks in parts:
        if merged and merged[-1][0] == fmt:
            merged[-1] = (fmt, torch.cat((merged[-1][1], blocks)))
        else:
            merged.append((fmt, blocks))
    return tuple(merged)


def _layout_rows(blocks: torch.Tensor, fmt: str, layout: int, in_features: int) -> torch.Tensor:
    """GGUF rows of ``fmt`` in kernel ``layout`` (one that holds them exactly): ``uint8 [rows, bytes]``."""
    spec = FORMATS[fmt]
    per_block = blocks.reshape(blocks.shape[0], -1, spec.gguf_bytes)
    if spec.gguf_weights == BLOCK_SIZE:  # the same layout with float32 scales
        halves = (spec.layout_bytes - spec.gguf_bytes) // 2
        wide = per_block[..., : 2 * halves].contiguous().view(torch.float16).float().view(torch.uint8)
        packed = torch.cat((wide, per_block[..., 2 * halves :]), dim=-1)
    else:
        packed = _pack(_K_QUANT_READERS[fmt](per_block), spec.layout)
    rows = packed.reshape(blocks.shape[0], -1)
    if layout != spec.layout:
        rows = _pack(_unpack(rows, spec.layout), layout).reshape(blocks.shape[0], -1)
    assert rows.shape[1] == in_features // BLOCK_SIZE * FORMATS[_LAYOUTS[layout].name].layout_bytes
    return rows.contiguous()


def _gguf_from_packed(packed: torch.Tensor, fmt: str) -> tuple[tuple[str, torch.Tensor], ...] | None:
    """The GGUF rows of exact-layout rows of a 32-weight format whose float32 scales are float16 values
    (those that came from a GGUF file); None for the K-quants' split blocks or other scales."""
    spec = FORMATS[fmt]
    if spec.gguf_weights != BLOCK_SIZE:
        return None
    per_block = packed.reshape(packed.shape[0], -1, spec.layout_bytes)
    halves = (spec.layout_bytes - spec.gguf_bytes) // 2
    wide = per_block[..., : 4 * halves].contiguous().view(torch.float32)
    narrow = wide.to(torch.float16)
    if not torch.equal(narrow.float(), wide):
        return None
    blocks = torch.cat((narrow.view(torch.uint8), per_block[..., 4 * halves :]), dim=-1)
    return ((fmt, blocks.reshape(packed.shape[0], -1).contiguous()),)


def shared_format(parts: Sequence[QuantizedWeight]) -> str | None:
    """The format :meth:`QuantizedWeight.cat` stacks ``parts``' exact layout in: theirs if they share
    one, else the layout with the fewest bytes that holds every part's values exactly (Q4_0 and Q5_0
    codes fit Q8_0's signed bytes, Q4_1's fit Q5_1's, Q8_0 blocks are Q6_K blocks with equal scales);
    ``None`` when there is none or the parts differ in ``in``."""
    if not parts or len({p.in_features for p in parts}) != 1:
        return None
    return _shared_layout([p.format for p in parts])


def _shared_layout(formats: Sequence[str]) -> str | None:
    """The format of the smallest layout that holds the values of every one of ``formats`` exactly."""
    if len(set(formats)) == 1:
        return formats[0]
    if not all(fmt in FORMATS for fmt in formats):
        return None
    needs = [_LAYOUTS[FORMATS[fmt].layout] for fmt in formats]
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


def _gguf_rows32(rows: torch.Tensor, fmt: str) -> torch.Tensor:
    """float32 ``[rows, in]`` of GGUF rows of a 32-weight format, read from the file's blocks in place:
    the values (and bits) of :func:`_dequantize` on their kernel layout, in a few torch operations
    (an embedding lookup runs this every step)."""
    spec, layout = FORMATS[fmt], _LAYOUTS[FORMATS[fmt].layout]
    blocks = rows.reshape(rows.shape[0], -1, spec.gguf_bytes)
    head = 4 if layout.has_min else 2
    scales = blocks[..., :head].view(torch.float16).float()
    if layout.bits == 8:
        codes = blocks[..., head:].view(torch.int8).float()
    else:
        nibbles = _nibbles(blocks[..., -16:]).to(torch.int16)
        if layout.bits == 5:
            nibbles |= _bits(blocks[..., head : head + 4], 32).to(torch.int16) << 4
        codes = (nibbles + layout.low).float()
    values = codes * scales[..., :1]
    if layout.has_min:
        values = values + scales[..., 1:]
    return values.reshape(rows.shape[0], -1)


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
