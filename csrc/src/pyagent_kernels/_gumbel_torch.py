"""Pure-torch fallback of the Gumbel-max kernel (kernels/sampling/gumbel.c), token for token.

Integer hashing runs on int64 tensors (multiplication wraps like uint64; right shifts are made
logical with a mask) and the logarithm is the kernel's fixed double-precision polynomial, built
from ``frexp`` and IEEE double operations only, so every noise value equals the C kernel's.
"""

from __future__ import annotations

import torch

from pyagent_kernels._checks import check_selectable_rows

_GOLDEN = 0x9E3779B97F4A7C15
_MIX1 = 0xBF58476D1CE4E5B9
_MIX2 = 0x94D049BB133111EB
_LN2 = float.fromhex("0x1.62e42fefa39efp-1")
_SQRT_HALF = float.fromhex("0x1.6a09e667f3bcdp-1")
_INV_ODD = tuple(1.0 / k for k in (19, 17, 15, 13, 11, 9, 7, 5, 3))


def _signed(value: int) -> int:
    return value - (1 << 64) if value >= 1 << 63 else value


def _shr(z: torch.Tensor, bits: int) -> torch.Tensor:
    """Logical right shift of int64 values holding uint64 bits."""
    return (z >> bits) & ((1 << (64 - bits)) - 1)


def mix64(z: torch.Tensor) -> torch.Tensor:
    """The splitmix64 finaliser on int64 tensors (uint64 arithmetic)."""
    z = (z ^ _shr(z, 30)) * _signed(_MIX1)
    z = (z ^ _shr(z, 27)) * _signed(_MIX2)
    return z ^ _shr(z, 31)


def log_poly(x: torch.Tensor) -> torch.Tensor:
    """The kernel's pak_log on positive normal float64 values."""
    m, e = torch.frexp(x)
    low = m < _SQRT_HALF
    m = torch.where(low, m * 2.0, m)
    e = torch.where(low, e - 1, e)
    f = m - 1.0
    s = f / (2.0 + f)
    s2 = s * s
    q = torch.full_like(s, _INV_ODD[0])
    for c in _INV_ODD[1:]:
        q = q * s2 + c
    q = q * s2 + 1.0
    return e.double() * _LN2 + (2.0 * s) * q


def gumbel_noise(key: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """Gumbel(0, 1) noise of ``tokens`` (int64) under the per-element row ``key`` (int64)."""
    h = mix64(key + (tokens + 1) * _signed(_GOLDEN))
    u = (_shr(h, 11).double() + 0.5) * 2.0**-53
    return -log_poly(-log_poly(u))


def row_keys(seeds: torch.Tensor, steps: torch.Tensor) -> torch.Tensor:
    """Per-row keys ``mix64(seed + (step + 1) * G)``."""
    return mix64(seeds + (steps + 1) * _signed(_GOLDEN))


def gumbel_sample_torch(logits: torch.Tensor, seeds: torch.Tensor, steps: torch.Tensor) -> torch.Tensor:
    """Token per row as in ``pyagent_kernels.gumbel.gumbel_sample`` (arguments already validated)."""
    check_selectable_rows("gumbel_sample", logits)
    row, token = (logits > float("-inf")).nonzero(as_tuple=True)
    scores = torch.full(logits.shape, float("-inf"), dtype=torch.float64)
    scores[row, token] = logits[row, token].double() + gumbel_noise(row_keys(seeds, steps)[row], token)
    return scores.argmax(dim=1)
