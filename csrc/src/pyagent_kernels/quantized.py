"""Weight matrices kept in a GGUF block-quantized format, for :func:`pyagent_kernels.linear.linear`.

A :class:`QuantizedWeight` holds a llama.cpp tensor in its block format (Q4_0, Q4_1 or Q8_0: blocks
of 32 weights sharing a scale) instead of a dense float matrix: 5 to 9 bits per weight rather than 16
or 32, so a memory-bound decode step reads 2 to 6 times fewer bytes. The blocks are those of the GGUF
file with their float16 scales widened to float32 (exact; the layout of ``include/pyagent/linear.h``).
The linear kernel decodes them as it goes into exactly the float32 values that the ``gguf`` package's
dequantization gives (bfloat16: those values rounded to nearest), so a product with a quantized
weight has the bits of the same product with :meth:`QuantizedWeight.dequantize`'s matrix.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from pyagent_kernels.errors import KernelArgumentError

__all__ = ["BLOCK_SIZE", "FORMATS", "QuantizedWeight"]

#: Weights per block in every supported format.
BLOCK_SIZE = 32

#: Format name -> (GGML type id, float16 scales per block, bytes of codes per block).
FORMATS: dict[str, tuple[int, int, int]] = {"q4_0": (2, 1, 16), "q4_1": (3, 2, 16), "q8_0": (8, 1, 32)}


class QuantizedWeight:
    """A ``[out, in]`` weight matrix stored in a block-quantized format.

    Build one from a GGUF tensor's bytes with :meth:`from_gguf`; the constructor takes rows already
    in the kernel's layout (:attr:`packed` of another weight, or a checkpoint that stored them).

    Args:
        packed: ``uint8 [out, in / 32 * block bytes]``: each row's blocks with float32 scales.
        fmt: ``"q4_0"``, ``"q4_1"`` or ``"q8_0"`` (see :data:`FORMATS`).
        in_features: ``in``, a multiple of 32.

    Raises:
        KernelArgumentError: an unknown format, or rows whose dtype, layout or size does not fit
            ``in_features`` weights per row.
    """

    def __init__(self, packed: torch.Tensor, fmt: str, in_features: int) -> None:
        _check_rows(packed, fmt, in_features, scale_bytes=4, what="packed")
        self.packed = packed
        self.format = fmt
        self.in_features = in_features
        self.shape: tuple[int, int] = (packed.shape[0], in_features)
        """``(out, in)``, the shape of the dense matrix."""
        self.type_id: int = FORMATS[fmt][0]
        """The GGML type id of the format (the kernel's ``wtype``)."""

    @classmethod
    def from_gguf(cls, blocks: torch.Tensor, fmt: str, in_features: int) -> QuantizedWeight:
        """The weight whose rows a GGUF file stores as ``blocks`` (``uint8 [out, row bytes]``, float16
        scales); the scales are widened to float32, which is exact."""
        _check_rows(blocks, fmt, in_features, scale_bytes=2, what="GGUF")
        _, scales, codes = FORMATS[fmt]
        per_block = blocks.reshape(blocks.shape[0], -1, 2 * scales + codes)
        wide = per_block[..., : 2 * scales].contiguous().view(torch.float16).float().view(torch.uint8)
        return cls(torch.cat((wide, per_block[..., 2 * scales :]), dim=-1).reshape(blocks.shape[0], -1),
                   fmt, in_features)

    def __repr__(self) -> str:
        return f"QuantizedWeight({self.format}, shape={list(self.shape)})"

    @classmethod
    def cat(cls, parts: Sequence[QuantizedWeight]) -> QuantizedWeight:
        """The rows of ``parts`` stacked (one format and one ``in`` for all)."""
        if not parts:
            raise KernelArgumentError("QuantizedWeight.cat needs at least one part")
        first = parts[0]
        for part in parts[1:]:
            if (part.format, part.in_features) != (first.format, first.in_features):
                raise KernelArgumentError(
                    f"cannot stack {part.format} rows of {part.in_features} weights onto "
                    f"{first.format} rows of {first.in_features}; dequantize one of them"
                )
        return cls(torch.cat([p.packed for p in parts]), first.format, first.in_features)

    def rows(self, index: torch.Tensor, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """The dense rows ``index`` (an embedding lookup), in ``dtype``."""
        return _dequantize(self.packed[index], self.format).to(dtype)

    def dequantize(self, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """The dense ``[out, in]`` matrix in ``dtype``: the gguf package's float32 values, then rounded."""
        return _dequantize(self.packed, self.format).to(dtype)


def _check_rows(rows: torch.Tensor, fmt: str, in_features: int, *, scale_bytes: int, what: str) -> None:
    """Raise :class:`KernelArgumentError` unless ``rows`` can hold ``in_features`` weights of ``fmt``
    per row with scales of ``scale_bytes`` bytes."""
    if fmt not in FORMATS:
        raise KernelArgumentError(f"unknown quantized format {fmt!r}; supported: {', '.join(FORMATS)}")
    if in_features <= 0 or in_features % BLOCK_SIZE:
        raise KernelArgumentError(
            f"a {fmt} row holds whole blocks of {BLOCK_SIZE} weights; in_features={in_features} is not a "
            "positive multiple of it"
        )
    _, scales, codes = FORMATS[fmt]
    row_bytes = in_features // BLOCK_SIZE * (scale_bytes * scales + codes)
    if rows.dtype != torch.uint8 or rows.dim() != 2 or rows.shape[1] != row_bytes:
        raise KernelArgumentError(
            f"{what} {fmt} rows of {in_features} weights must be uint8 [out, {row_bytes}]; "
            f"got {rows.dtype} {list(rows.shape)}"
        )
    if rows.device.type != "cpu" or not rows.is_contiguous():
        raise KernelArgumentError(f"{what} {fmt} rows must be a contiguous CPU tensor; pass rows.contiguous()")


def _dequantize(packed: torch.Tensor, fmt: str) -> torch.Tensor:
    """float32 ``[rows, in]`` from packed rows: one rounding per multiply and per add."""
    rows, (_, scales, codes) = packed.shape[0], FORMATS[fmt]
    per_block = packed.reshape(rows, -1, 4 * scales + codes)
    scale = per_block[..., 0:4].contiguous().view(torch.float32)
    packed_codes = per_block[..., 4 * scales :]
    if fmt == "q8_0":
        return (packed_codes.contiguous().view(torch.int8).float() * scale).reshape(rows, -1)
    nibbles = torch.cat((packed_codes & 0xF, packed_codes >> 4), dim=-1).float()
    if fmt == "q4_0":
        return ((nibbles - 8.0) * scale).reshape(rows, -1)
    return (nibbles * scale + per_block[..., 4:8].contiguous().view(torch.float32)).reshape(rows, -1)
