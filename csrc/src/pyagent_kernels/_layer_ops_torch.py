"""Pure-torch fallbacks of :mod:`pyagent_kernels.layer_ops`: the same operations as separate torch
calls. rope_split gives the C kernel's bits; add_rms_norm and silu_mul agree with it to a few
float32 ulp (torch sums the squares and computes exp in its own order)."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def add_rms_norm_torch(hidden: torch.Tensor, weight: torch.Tensor, eps: float,
                       delta: torch.Tensor | None) -> torch.Tensor:
    """``hidden += delta`` (in place), then RMSNorm of ``hidden`` scaled by ``weight``."""
    if delta is not None:
        hidden.add_(delta)
    if hidden.dtype == torch.float32:
        return F.rms_norm(hidden, (hidden.shape[-1],), weight, eps=eps)
    return weight * F.rms_norm(hidden.float(), (hidden.shape[-1],), eps=eps).to(hidden.dtype)


def rope_split_torch(qkv: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, heads: int, kv_heads: int,
                     dim: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Rotate-half RoPE on the query and key heads of ``qkv``; contiguous ``q``, ``k`` and ``v``."""
    tokens = qkv.shape[0]
    qk = qkv[:, : (heads + kv_heads) * dim].view(tokens, heads + kv_heads, dim)
    first, second = qk.chunk(2, dim=-1)
    qk = qk * cos.unsqueeze(1) + torch.cat((-second, first), dim=-1) * sin.unsqueeze(1)
    v = qkv[:, (heads + kv_heads) * dim :].reshape(tokens, kv_heads, dim)
    return qk[:, :heads].contiguous(), qk[:, heads:].contiguous(), v.contiguous()


def silu_mul_torch(gate_up: torch.Tensor) -> torch.Tensor:
    """``silu(gate) * up`` for ``gate_up = [gate | up]`` along the last dimension."""
    gate, up = gate_up.chunk(2, dim=-1)
    return F.silu(gate) * up
