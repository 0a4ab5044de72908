"""Pure-torch fallback of the token-bitmask kernel; same results as kernels/grammar/bitmask.c."""

from __future__ import annotations

import torch

from pyagent_kernels._checks import index_error

_BIT_SHIFTS = torch.arange(32, dtype=torch.int32)


def allowed_tokens(bitmask: torch.Tensor, vocab: int) -> torch.Tensor:
    """Unpack an int32 ``[rows, ceil(vocab / 32)]`` bitmask into a bool ``[rows, vocab]`` tensor."""
    bits = (bitmask.unsqueeze(-1) >> _BIT_SHIFTS) & 1
    return bits.view(bitmask.shape[0], bitmask.shape[1] * 32)[:, :vocab].bool()


def apply_token_bitmask_torch(
    logits: torch.Tensor, bitmask: torch.Tensor, indices: torch.Tensor | None
) -> None:
    """Set logits of disallowed tokens to -inf in place (arguments already validated)."""
    rows, vocab = logits.shape
    if indices is None:
        logits.masked_fill_(~allowed_tokens(bitmask, vocab), float("-inf"))
        return
    bad = ((indices < 0) | (indices >= rows)).nonzero()
    if len(bad):
        raise index_error(indices, int(bad[0, 0]), rows)
    if len(indices) == 0:
        return
    selected = indices.long()
    masked = logits.index_select(0, selected)
    masked.masked_fill_(~allowed_tokens(bitmask.index_select(0, selected), vocab), float("-inf"))
    logits.index_copy_(0, selected, masked)
