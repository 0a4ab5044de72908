"""The floating-point type samplers compute in."""

from __future__ import annotations

import torch


def working_dtype(logits: torch.Tensor) -> torch.dtype:
    """``float32`` for half-precision logits, else the logits' own type (float32 or float64)."""
    return torch.promote_types(logits.dtype, torch.float32)
