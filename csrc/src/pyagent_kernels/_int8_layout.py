"""The int8 path's weight layout (``include/pyagent/linear_int8.h``) and the integer fields of GGUF blocks.

:func:`interleave` turns a GGUF tensor's rows into groups of :data:`GROUP_ROWS` rows whose blocks lie
field by field, each field with its 16 rows side by side (the byte count is the file's, but for the
last group's padding rows); :func:`deinterleave` undoes it. :func:`integer_blocks` reads GGUF blocks
into the integers and float16 scales the int8 product multiplies (the torch fallback's input).
"""

from __future__ import annotations

import ctypes
import mmap
import threading
from typing import NamedTuple

import torch

#: Weight rows per interleaved group.
GROUP_ROWS = 16

#: Per GGUF format, its block's fields in the layout's order of sections: (offset in the GGUF block, bytes).
SECTIONS: dict[str, tuple[tuple[int, int], ...]] = {
    "q4_0": ((2, 16), (0, 2)),
    "q4_1": ((4, 16), (0, 2), (2, 2)),
    "q5_0": ((6, 16), (2, 4), (0, 2)),
    "q5_1": ((8, 16), (4, 4), (0, 2), (2, 2)),
    "q8_0": ((2, 32), (0, 2)),
    "q4_k": ((16, 128), (4, 12), (0, 2), (2, 2)),
    "q5_k": ((48, 128), (16, 32), (4, 12), (0, 2), (2, 2)),
    "q6_k": ((0, 128), (128, 64), (192, 16), (208, 2)),
}

#: GGML type id, weights and bytes per GGUF block of each format.
GGUF_BLOCKS: dict[str, tuple[int, int, int]] = {
    "q4_0": (2, 32, 18), "q4_1": (3, 32, 20), "q5_0": (6, 32, 22), "q5_1": (7, 32, 24), "q8_0": (8, 32, 34),
    "q4_k": (12, 256, 144), "q5_k": (13, 256, 176), "q6_k": (14, 256, 210),
}

# Q5_0's and Q5_1's word of high bits: GGUF bit j moves to bit _HIGH_BIT[j] of the rearranged word (bit
# 2k of byte i for weight 4k + i, bit 2k + 1 for weight 16 + 4k + i).
_HIGH_BIT = [8 * (j % 4) + 2 * (j // 4) if j < 16 else 8 * (j % 4) + 2 * ((j - 16) // 4) + 1 for j in range(32)]
_HIGH_WORD = {"q5_0": 2, "q5_1": 4}


def _permute_bits(words: torch.Tensor, target: list[int]) -> torch.Tensor:
    """``uint8 [..., 4]`` little-endian words with bit j moved to bit ``target[j]``."""
    bits = ((words.unsqueeze(-1) >> torch.arange(8, dtype=torch.uint8)) & 1).flatten(-2)
    moved = torch.empty_like(bits)
    moved[..., target] = bits
    weights = torch.tensor([1 << k for k in range(8)], dtype=torch.uint8)
    return (moved.reshape(*words.shape[:-1], 4, 8) * weights).sum(-1, dtype=torch.uint8)


def _with_high_bits(per_block: torch.Tensor, fmt: str, target: list[int]) -> torch.Tensor:
    """GGUF blocks ``[..., bytes]`` of a 5-bit 32-weight format with the word of high bits permuted."""
    if fmt not in _HIGH_WORD:
        return per_block
    start = _HIGH_WORD[fmt]
    changed = per_block.clone()
    changed[..., start : start + 4] = _permute_bits(per_block[..., start : start + 4], target)
    return changed


#: Linux's transparent huge pages: 2 MiB.
HUGE_PAGE = 2 << 20
#: Interleaved matrices smaller than this share regions of this many bytes (see :func:`huge_page_tensor`).
ARENA_BYTES = 32 << 20


class _Arena:
    """Regions of memory Linux may back with 2 MiB pages, handed out in 64-byte aligned slices; a
    region lives as long as a tensor uses it (each slice's tensor holds its region)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.region: mmap.mmap | None = None
        self.start = self.used = self.size = 0

    @staticmethod
    def _map(nbytes: int) -> tuple[mmap.mmap, int]:
        """A fresh region holding ``nbytes`` from a 2 MiB boundary, advised to use huge pages."""
        region = mmap.mmap(-1, nbytes + HUGE_PAGE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        start = -ctypes.addressof(ctypes.c_char.from_buffer(region)) % HUGE_PAGE
        region.madvise(mmap.MADV_HUGEPAGE, start, nbytes // mmap.PAGESIZE * mmap.PAGESIZE)
        return region, start

    def take(self, nbytes: int) -> torch.Tensor:
        if nbytes >= ARENA_BYTES:
            region, start = self._map(nbytes)
            return torch.frombuffer(region, dtype=torch.uint8, count=nbytes, offset=start)
        with self.lock:
            if self.region is None or self.used + nbytes > self.size:
                self.region, self.start = self._map(ARENA_BYTES)
                self.used, self.size = 0, ARENA_BYTES
            offset = self.start + self.used
            self.used += -(-nbytes // 64) * 64
            return torch.frombuffer(self.region, dtype=torch.uint8, count=nbytes, offset=offset)


_ARENA = _Arena()


def huge_page_tensor(nbytes: int) -> torch.Tensor:
    """``uint8 [nbytes]`` uninitialised, in memory Linux may back with 2 MiB pages (``MADV_HUGEPAGE``:
    transparent huge pages in "madvise" or "always" mode), smaller matrices sharing 32 MiB regions in
    the order they come (a model's, layer by layer). A decode step streams every matrix once, and with
    4 KiB pages each page costs a TLB miss and restarts the hardware prefetcher: a 17 MB interleaved
    matrix streamed 8 to 55% faster (thread CPU time, on this project's AMD EPYC host). Plain memory
    where ``madvise`` is missing."""
    if not hasattr(mmap, "MADV_HUGEPAGE"):
        return torch.empty(nbytes, dtype=torch.uint8)
    return _ARENA.take(nbytes)


def group_bytes(fmt: str, in_features: int) -> int:
    """Bytes of one group of :data:`GROUP_ROWS` rows of ``in_features`` weights: 16 GGUF rows."""
    _, weights, block = GGUF_BLOCKS[fmt]
    return GROUP_ROWS * in_features // weights * block


def interleave(blocks: torch.Tensor, fmt: str) -> torch.Tensor:
    """GGUF rows ``uint8 [rows, row bytes]`` as groups ``uint8 [ceil(rows / 16), group bytes]`` (in
    :func:`huge_page_tensor` memory); the last group is padded with rows of zero bytes (weights 0)."""
    rows, row_bytes = blocks.shape
    block = GGUF_BLOCKS[fmt][2]
    groups = -(-rows // GROUP_ROWS)
    padded = blocks
    if rows % GROUP_ROWS:
        padded = torch.zeros(groups * GROUP_ROWS, row_bytes, dtype=torch.uint8)
        padded[:rows] = blocks
    per_block = _with_high_bits(padded.reshape(groups, GROUP_ROWS, -1, block), fmt, _HIGH_BIT)
    nb = per_block.shape[2]
    out = huge_page_tensor(groups * group_bytes(fmt, nb * GGUF_BLOCKS[fmt][1])).view(groups, -1)
    start = 0
    for offset, size in SECTIONS[fmt]:  # each field copied once, straight into its section of the groups
        width = 4 if size % 4 == 0 else 2
        field = per_block[..., offset : offset + size].reshape(groups, GROUP_ROWS, nb, size // width, width)
        end = start + GROUP_ROWS * nb * size
        out[:, start:end].view(groups, nb, size // width, GROUP_ROWS, width).copy_(field.permute(0, 2, 3, 1, 4))
        start = end
    return out


def deinterleave(groups: torch.Tensor, fmt: str, rows: int) -> torch.Tensor:
    """The GGUF rows ``uint8 [rows, row bytes]`` that :func:`interleave` made ``groups`` from."""
    count = groups.shape[0]
    block = GGUF_BLOCKS[fmt][2]
    nb = groups.shape[1] // (GROUP_ROWS * block)
    per_block = torch.empty(count, GROUP_ROWS, nb, block, dtype=torch.uint8)
    start = 0
    for offset, size in SECTIONS[fmt]:
        width = 4 if size % 4 == 0 else 2
        field = groups[:, start : start + GROUP_ROWS * nb * size].reshape(count, nb, size // width, GROUP_ROWS, width)
        per_block[..., offset : offset + size] = field.permute(0, 3, 1, 2, 4).reshape(count, GROUP_ROWS, nb, size)
        start += GROUP_ROWS * nb * size
    inverse = [0] * 32
    for j, bit in enumerate(_HIGH_BIT):
        inverse[bit] = j
    restored = _with_high_bits(per_block, fmt, inverse)
    return restored.reshape(count * GROUP_ROWS, nb * block)[:rows].contiguous()


class IntegerBlocks(NamedTuple):
    """GGUF blocks as the integers an int8 product multiplies, per row and block (``nb`` per row).

    Attributes:
        codes: int32 ``[rows, nb, weights]``: each weight's signed code (Q4_0: nibble - 8, Q5_0: code
            - 16, Q6_K: code - 32; Q4_1, Q5_1, Q4_K, Q5_K: the unsigned code; Q8_0: the byte).
        scales: int32 ``[rows, nb, sub]``: the K-quants' sub-block scales (8 of 32 weights, or Q6_K's
            16 of 16); ones ``[rows, nb, 1]`` for the 32-weight formats.
        minima: int32 ``[rows, nb, 8]``: Q4_K's and Q5_K's 6-bit minima, else None.
        d: float32 ``[rows, nb]``: the float16 scale.
        m: float32 ``[rows, nb]``: the float16 minimum (Q4_1, Q5_1) or dmin (Q4_K, Q5_K), else None.
    """

    codes: torch.Tensor
    scales: torch.Tensor
    minima: torch.Tensor | None
    d: torch.Tensor
    m: torch.Tensor | None


def _half(per_block: torch.Tensor, offset: int) -> torch.Tensor:
    return per_block[..., offset : offset + 2].contiguous().view(torch.float16).float().squeeze(-1)


def _nibbles(packed: torch.Tensor) -> torch.Tensor:
    """Codes from bytes whose low halves come first, then the high halves (GGUF's 4-bit order)."""
    return torch.cat((packed & 0xF, packed >> 4), dim=-1).to(torch.int32)


def _bits(bytes_: torch.Tensor) -> torch.Tensor:
    """The bits of little-endian bytes ``[..., n]`` as int32 ``[..., 8n]``, bit j of the word at j."""
    return ((bytes_.unsqueeze(-1) >> torch.arange(8, dtype=torch.uint8)) & 1).flatten(-2).to(torch.int32)


def integer_blocks(blocks: torch.Tensor, fmt: str) -> IntegerBlocks:
    """The :class:`IntegerBlocks` of GGUF rows ``uint8 [rows, row bytes]`` of ``fmt``."""
    _, weights, size = GGUF_BLOCKS[fmt]
    per_block = blocks.reshape(blocks.shape[0], -1, size)
    rows, nb = per_block.shape[:2]
    ones = torch.ones(rows, nb, 1, dtype=torch.int32)
    if fmt == "q8_0":
        return IntegerBlocks(per_block[..., 2:].contiguous().view(torch.int8).to(torch.int32), ones, None,
                             _half(per_block, 0), None)
    if fmt in ("q4_0", "q4_1", "q5_0", "q5_1"):
        has_min, five = fmt.endswith("_1"), fmt.startswith("q5")
        start = (4 if has_min else 2) + (4 if five else 0)
        codes = _nibbles(per_block[..., start:])
        if five:
            codes |= _bits(per_block[..., start - 4 : start]) << 4
        bias = {"q4_0": 8, "q5_0": 16}.get(fmt, 0)
        return IntegerBlocks(codes - bias, ones, None, _half(per_block, 0), _half(per_block, 2) if has_min else None)
    if fmt == "q6_k":
        low = per_block[..., :128].reshape(rows, nb, 2, 1, 64) >> torch.tensor([0, 4], dtype=torch.uint8).reshape(2, 1)
        high = per_block[..., 128:192].reshape(rows, nb, 2, 1, 32) >> torch.tensor(
            [0, 2, 4, 6], dtype=torch.uint8).reshape(4, 1)
        codes = (low & 0xF).reshape(rows, nb, 256).to(torch.int32)
        codes |= (high & 3).reshape(rows, nb, 256).to(torch.int32) << 4
        scales = per_block[..., 192:208].contiguous().view(torch.int8).to(torch.int32)
        return IntegerBlocks(codes - 32, scales, None, _half(per_block, 208), None)
    packed = per_block[..., 4:16]
    first, second, third = packed[..., 0:4], packed[..., 4:8], packed[..., 8:12]
    scales = torch.cat((first & 63, (third & 0xF) | ((first >> 6) << 4)), dim=-1).to(torch.int32)
    minima = torch.cat((second & 63, (third >> 4) | ((second >> 6) << 4)), dim=-1).to(torch.int32)
    codes = per_block[..., -128:].reshape(rows, nb, 4, 1, 32) >> torch.tensor([0, 4], dtype=torch.uint8).reshape(2, 1)
    codes = (codes & 0xF).reshape(rows, nb, 256).to(torch.int32)
    if fmt == "q5_k":
        high = (per_block[..., 16:48].reshape(rows, nb, 1, 32) >> torch.arange(8, dtype=torch.uint8).reshape(8, 1)) & 1
        codes |= high.reshape(rows, nb, 256).to(torch.int32) << 4
    assert weights == 256
    return IntegerBlocks(codes, scales, minima, _half(per_block, 0), _half(per_block, 2))
