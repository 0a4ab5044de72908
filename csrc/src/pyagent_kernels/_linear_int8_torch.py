"""Pure-torch fallback of the int8 path (``include/pyagent/linear_int8.h``): the C kernel's bits.

The activations are quantized by the same definition (llama.cpp's Q8_0, per 32 values), the integer
sums are exact (int64 products), and each fused multiply-add of the documented order is
computed in float64 and rounded to float32 once: the product of two float32 values is exact in
float64, and the sum is rounded to odd (the float64 nearest toward the exact sum's side when it is
inexact), which makes the final rounding to float32 that of the exact value. So the fallback gives
the C kernel's bits, only slower (it runs when the extension is missing).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from pyagent_kernels._int8_layout import integer_blocks


def fma32(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
    """``a * b + c`` of float32 tensors rounded once to float32 (as ``fmaf``), broadcasting."""
    product = a.double() * b.double()  # exact: 24 + 24 bits
    addend = c.double()
    total = product + addend
    # the rounding error of the sum (TwoSum), then round to odd: an inexact sum with an even last bit
    # moves one float64 step toward the exact value
    virtual = total - product
    error = (product - (total - virtual)) + (addend - virtual)
    even = (total.view(torch.int64) & 1) == 0
    nudged = torch.nextafter(total, torch.where(error > 0, torch.inf, -torch.inf))
    return torch.where((error != 0) & even, nudged, total).float()


def round_away(values: torch.Tensor) -> torch.Tensor:
    """``roundf``: the nearest integer, halves away from zero (float32 in, float32 out)."""
    whole = values.trunc()
    return whole + torch.where((values - whole).abs() >= 0.5, values.sign(), torch.zeros_like(values))


def quantize32(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """llama.cpp's Q8_0 of float32 rows ``[rows, in]`` per 32 values: scales float32 ``[rows, nb]``
    (kept in float32) and codes int32 ``[rows, nb, 32]``."""
    blocks = x.reshape(x.shape[0], -1, 32)
    d = torch.where(blocks.isnan(), 0.0, blocks.abs()).amax(-1) / 127  # NaN never wins, as in C
    inverse = torch.where(d == 0, torch.zeros_like(d), 1 / d)
    q = round_away(torch.nan_to_num(blocks * inverse.unsqueeze(-1)).clamp(-127, 127))
    return d, q.to(torch.int32)


def _part(x: torch.Tensor, fmt: str, blocks: torch.Tensor) -> torch.Tensor:
    """float32 ``[rows, out]``: ``x`` (float32) times one part's GGUF rows, in the documented order."""
    weights = integer_blocks(blocks, fmt)
    ad, q = quantize32(x)  # [rows, in / 32], [rows, in / 32, 32]
    rows, out = x.shape[0], blocks.shape[0]
    sub = weights.scales.shape[-1]  # sub-blocks per GGUF block: 1 (32-weight formats), 8 or 16
    size = weights.codes.shape[-1] // sub  # weights per sub-block
    codes = weights.codes.reshape(out, -1, size).long()  # [out, sub-blocks, size], in row order
    acts = q.reshape(rows, -1, size).long()
    ds = ad * q.sum(-1).float()  # d * s of each activation block
    y = torch.zeros(rows, out)
    for index in range(codes.shape[1]):
        b, j = divmod(index, sub)
        block = index * size // 32  # the activation block of this sub-block
        sums = (acts[:, index] @ codes[:, index].T).float()  # [rows, out], exact integers
        scale = weights.d[:, b] * weights.scales[:, b, j].float()  # exact: 1 for the 32-weight formats
        y = fma32(scale.unsqueeze(0) * ad[:, block].unsqueeze(1), sums, y)
        if weights.m is not None:  # the minimum: Q4_1/Q5_1's m, or -(dmin * m) of a K-quant sub-block
            minimum = weights.m[:, b]
            if weights.minima is not None:
                minimum = -(minimum * weights.minima[:, b, j].float())
            y = fma32(minimum.unsqueeze(0), ds[:, block].unsqueeze(1), y)
    return y


def linear_int8_torch(x: torch.Tensor, parts: Sequence[tuple[str, torch.Tensor]]) -> torch.Tensor:
    """float32 ``[rows, sum of outs]``: ``x`` (float32 or bfloat16) times the stacked GGUF rows of
    ``parts`` (format, ``uint8 [out, row bytes]``), the C kernel's int8 product bit for bit."""
    wide = x.float()
    return torch.cat([_part(wide, fmt, blocks) for fmt, blocks in parts], dim=1)
