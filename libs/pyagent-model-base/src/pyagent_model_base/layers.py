"""Building blocks of the hybrid decoders (:mod:`pyagent_model_base.hybrid`), one call each.

Every matrix product is :func:`pyagent_kernels.linear.linear` (a row's bits do not depend on its
batch; a weight may be a GGUF block-quantized matrix), RMSNorm is :func:`pyagent_kernels.layer_ops.
add_rms_norm`, and SwiGLU's activation :func:`pyagent_kernels.layer_ops.silu_mul`; the rest (RoPE on
part of a head, gates, grouped norms) are element-wise torch operations in float32, as transformers
computes them.
"""

from __future__ import annotations

import attrs
import torch
import torch.nn.functional as F

from pyagent_kernels.layer_ops import add_rms_norm, silu_mul
from pyagent_kernels.linear import linear
from pyagent_kernels.quantized import QuantizedWeight

#: A dense matrix, or one kept in a GGUF block format.
Weight = torch.Tensor | QuantizedWeight


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """``weight * x / sqrt(mean(x ** 2) + eps)`` over the last dimension of ``x [..., dim]``."""
    rows = x.reshape(-1, x.shape[-1]).contiguous()
    return add_rms_norm(rows, weight, eps).view(x.shape)


def gated_group_norm(x: torch.Tensor, gate: torch.Tensor, weight: torch.Tensor, groups: int,
                     eps: float) -> torch.Tensor:
    """Mamba2's gated RMSNorm: ``x * silu(gate)`` normalized over each of ``groups`` equal parts of the
    last dimension, times ``weight``; computed in float32, rounded to ``x``'s dtype before the weight."""
    values = x.float() * F.silu(gate.float())
    parts = values.view(*values.shape[:-1], groups, -1)
    parts = parts * torch.rsqrt(parts.pow(2).mean(-1, keepdim=True) + eps)
    return weight * parts.view(values.shape).to(x.dtype)


def norm_then_gate(x: torch.Tensor, gate: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """Gated DeltaNet's output norm: ``weight * rmsnorm(x)`` (float32, rounded), then ``* silu(gate)``."""
    values = x.float()
    normed = weight * (values * torch.rsqrt(values.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)
    return (normed * F.silu(gate.float())).to(x.dtype)


def dense(x: torch.Tensor, weight: Weight, threads: int) -> torch.Tensor:
    """``x @ weight.T`` for ``x [..., in]`` (batch-invariant rows; GGUF blocks multiplied exactly)."""
    rows = x.reshape(-1, x.shape[-1]).contiguous()
    return linear(rows, weight, threads=threads, precision="exact").view(*x.shape[:-1], weight.shape[0])


def swiglu(x: torch.Tensor, gate_up: Weight, down: Weight, threads: int) -> torch.Tensor:
    """A gated MLP: ``down(silu(gate(x)) * up(x))`` with ``gate_up`` the two projections stacked."""
    return dense(silu_mul(dense(x, gate_up, threads), threads=threads), down, threads)


@attrs.frozen(eq=False)
class Rope:
    """Rotary position embedding over the first ``dim`` values of a head.

    Attributes:
        cos, sin: ``[max_positions, dim]``: each position's angles ``position * theta ** (-2i / dim)``
            (float32), repeated for the two halves, rounded to the working dtype once.
        interleaved: the rotated values pair ``(2i, 2i + 1)`` (DeepSeek's layout) instead of
            ``(i, i + dim / 2)`` (rotate-half); the output puts the first of each pair in the first
            half, as transformers' ``apply_rotary_pos_emb_interleave`` does.
    """

    cos: torch.Tensor
    sin: torch.Tensor
    interleaved: bool = False

    @classmethod
    def build(cls, dim: int, theta: float, max_positions: int, dtype: torch.dtype,
              interleaved: bool = False) -> Rope:
        """The tables of ``dim`` rotated values, base ``theta``, positions below ``max_positions``."""
        inv_freq = 1.0 / (theta ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))
        angles = torch.outer(torch.arange(max_positions).float(), inv_freq)
        angles = torch.cat((angles, angles), dim=-1)
        return cls(angles.cos().to(dtype), angles.sin().to(dtype), interleaved)

    @property
    def dim(self) -> int:
        """How many values of a head are rotated."""
        return int(self.cos.shape[1])

    def apply(self, heads: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """``heads [tokens, n, head_dim]`` with the first :attr:`dim` values of each head rotated."""
        cos, sin = self.cos[positions][:, None, :], self.sin[positions][:, None, :]
        rotated, rest = heads[..., : self.dim], heads[..., self.dim :]
        if self.interleaved:
            half = self.dim // 2
            first, second = rotated[..., 0::2], rotated[..., 1::2]
            cos, sin = cos[..., :half], sin[..., :half]
            rotated = torch.cat((first * cos - second * sin, second * cos + first * sin), dim=-1)
        else:
            halves = torch.cat((-rotated[..., self.dim // 2 :], rotated[..., : self.dim // 2]), dim=-1)
            rotated = rotated * cos + halves * sin
        return torch.cat((rotated, rest), dim=-1) if rest.shape[-1] else rotated
