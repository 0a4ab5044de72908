"""Pure-torch fallback of the int8 path (``include/pyagent/linear_int8.h``): the C kernel's bits.

The activations are quantized by the same definitions (llama.cpp's Q8_0 per 32 values, Q8_K per 256),
the integer sums are exact (int64 products), and each fused multiply-add of the documented order is
computed in float64 and rounded to float32 once: the product of two float32 values is exact in
float64, and the sum is rounded to odd (the float64 nearest toward the exact sum's side when it is
inexact), which makes the final rounding to float32 that of the exact value. So the fallback gives
the C kernel's bits, only slower (it runs when the extension is missing).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from pyagent_kernels._int8_layout import GGUF_BLOCKS, IntegerBlocks, integer_blocks


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
    d = blocks.abs().amax(-1) / 127
    inverse = torch.where(d == 0, torch.zeros_like(d), 1 / d)
    q = round_away(torch.nan_to_num(blocks * inverse.unsqueeze(-1)).clamp(-127, 127))
    return d, q.to(torch.int32)


def quantize256(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """llama.cpp's Q8_K of float32 rows per 256 values: scales float32 ``[rows, nb]`` and codes int32
    ``[rows, nb, 256]`` (zero where the super-block's largest magnitude is 0 or not finite)."""
    blocks = x.reshape(x.shape[0], -1, 256)
    first = blocks.abs().nan_to_num(nan=-1.0).argmax(-1, keepdim=True)  # torch.argmax: the first maximum
    peak = blocks.gather(-1, first).squeeze(-1)
    usable = (peak != 0) & peak.isfinite()
    # a true division (``number / tensor`` would multiply by the reciprocal: two roundings)
    iscale = torch.where(usable, torch.full_like(peak, -127.0) / torch.where(usable, peak, torch.ones_like(peak)),
                         torch.zeros_like(peak))
    scaled = torch.nan_to_num(iscale.unsqueeze(-1) * blocks).clamp(-128, 127)
    q = torch.where(usable.unsqueeze(-1), scaled.round().clamp(max=127), torch.zeros_like(scaled))
    d = torch.where(usable, 1 / torch.where(usable, iscale, torch.ones_like(iscale)), torch.zeros_like(iscale))
    return d.float(), q.to(torch.int32)


def _part(x: torch.Tensor, fmt: str, blocks: torch.Tensor) -> torch.Tensor:
    """float32 ``[rows, out]``: ``x`` (float32) times one part's GGUF rows, in the documented order."""
    weights = integer_blocks(blocks, fmt)
    k_quant = GGUF_BLOCKS[fmt][1] == 256
    ad, q = quantize256(x) if k_quant else quantize32(x)
    rows, out, nb = x.shape[0], blocks.shape[0], ad.shape[1]
    y = torch.zeros(rows, out)
    sub = weights.scales.shape[-1]
    for b in range(nb):
        codes = weights.codes[:, b].reshape(out, sub, -1).long()  # [out, sub, n]
        acts = q[:, b].reshape(rows, sub, -1).long()  # [rows, sub, n]
        per_sub = torch.einsum("osn,rsn->ros", codes, acts)
        total = (per_sub * weights.scales[:, b].long()).sum(-1).float()  # exact int, then nearest float32
        scale = weights.d[:, b].unsqueeze(0) * ad[:, b].unsqueeze(1)
        y = fma32(scale, total, y)
        y = _minimum_step(y, weights, b, ad[:, b], acts, k_quant)
    return y


def _minimum_step(y: torch.Tensor, weights: IntegerBlocks, b: int, ad: torch.Tensor, acts: torch.Tensor,
                  k_quant: bool) -> torch.Tensor:
    """The order's second step of block ``b`` for the formats with a minimum (else ``y``)."""
    if weights.m is None:
        return y
    sums = acts.sum(-1)  # [rows, sub]: the activations' sum per (sub-)block
    if not k_quant:  # the minimum times the activation block's d * s
        return fma32(weights.m[:, b].unsqueeze(0), (ad * sums[:, 0].float()).unsqueeze(1), y)
    assert weights.minima is not None
    scale = weights.m[:, b].unsqueeze(0) * ad.unsqueeze(1)
    mins = (sums.unsqueeze(1) * weights.minima[:, b].long().unsqueeze(0)).sum(-1).float()
    return fma32(-scale, mins, y)


def linear_int8_torch(x: torch.Tensor, parts: Sequence[tuple[str, torch.Tensor]]) -> torch.Tensor:
    """float32 ``[rows, sum of outs]``: ``x`` (float32 or bfloat16) times the stacked GGUF rows of
    ``parts`` (format, ``uint8 [out, row bytes]``), the C kernel's int8 product bit for bit."""
    wide = x.float()
    return torch.cat([_part(wide, fmt, blocks) for fmt, blocks in parts], dim=1)
