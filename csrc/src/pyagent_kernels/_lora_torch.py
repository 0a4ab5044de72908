"""Pure-torch fallback of :func:`pyagent_kernels.lora.lora_apply`: the same shrink and expand as
torch products, row by row (so a row's result never depends on the other rows of the batch, as the
linear fallback does it); other bits than the C kernel, which sums in its documented order."""

from __future__ import annotations

from itertools import pairwise

import torch


def lora_apply_torch(x: torch.Tensor, y: torch.Tensor, slots: torch.Tensor, a: torch.Tensor, b: torch.Tensor,
                     scales: torch.Tensor, ranks: torch.Tensor, starts: torch.Tensor) -> None:
    """``y += scale * (x A^T) B^T`` per row of a slot, per slice (the layouts of ``pyagent/lora.h``), in place."""
    bounds = starts.tolist()
    for row, slot in enumerate(slots.tolist()):
        if slot < 0:
            continue
        for k, (begin, end) in enumerate(pairwise(bounds)):
            rank, scale = int(ranks[slot, k]), float(scales[slot, k])
            if rank == 0 or scale == 0.0:
                continue
            u = x[row : row + 1].float() @ a[slot, k, :rank].float().T
            delta = (u @ b[slot, :rank, begin:end].float()) * scale
            y[row : row + 1, begin:end] = (y[row : row + 1, begin:end].float() + delta).to(y.dtype)
