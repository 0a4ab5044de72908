"""The small operations between a decoder layer's matrix products, one call each (C or torch).

``add_rms_norm`` adds a residual in place and normalizes, ``rope_split`` rotates the query and key
heads of a fused q/k/v projection and splits it, ``silu_mul`` is SwiGLU's activation. Each costs
one C call instead of several torch dispatches (the semantics are in ``include/pyagent/layer_ops.h``);
every row is computed alone, so results do not depend on the batch. The torch fallbacks
(:mod:`pyagent_kernels._layer_ops_torch`) give rope_split's bits and agree with the others to a few
float32 ulp.
"""

from __future__ import annotations

import torch

from pyagent_kernels import _extension
from pyagent_kernels._extension import Backend
from pyagent_kernels._layer_ops_torch import add_rms_norm_torch, rope_split_torch, silu_mul_torch
from pyagent_kernels.errors import KernelArgumentError

__all__ = ["add_rms_norm", "rope_split", "silu_mul"]

_DTYPES = {torch.float32: 0, torch.bfloat16: 1}


def _check(kernel: str, dtype: torch.dtype, **tensors: torch.Tensor) -> None:
    """Every tensor is a contiguous CPU tensor of ``dtype`` (float32 or bfloat16)."""
    if dtype not in _DTYPES:
        raise KernelArgumentError(f"{kernel}: dtype {dtype} is not supported; use torch.float32 or torch.bfloat16")
    for name, tensor in tensors.items():
        if not isinstance(tensor, torch.Tensor):
            raise KernelArgumentError(f"{kernel}: {name} must be a torch.Tensor, got {type(tensor).__name__}")
        if tensor.dtype != dtype:
            raise KernelArgumentError(f"{kernel}: {name} has dtype {tensor.dtype}, the others {dtype}; use one dtype")
        if tensor.device.type != "cpu" or not tensor.is_contiguous():
            raise KernelArgumentError(f"{kernel}: {name} must be a contiguous CPU tensor; pass {name}.contiguous()")


def add_rms_norm(hidden: torch.Tensor, weight: torch.Tensor, eps: float, delta: torch.Tensor | None = None, *,
                 backend: Backend = "auto") -> torch.Tensor:
    """With ``delta``, ``hidden += delta`` in place; return RMSNorm(``hidden``) * ``weight``.

    Args:
        hidden: ``[rows, dim]``; modified in place when ``delta`` is given.
        weight: ``[dim]``, the same dtype.
        eps: added to the mean square.
        delta: ``[rows, dim]`` or ``None``.
        backend: "auto", "c" or "torch".
    """
    extra = {} if delta is None else {"delta": delta}
    _check("add_rms_norm", hidden.dtype, hidden=hidden, weight=weight, **extra)
    rows, dim = hidden.shape
    if weight.shape != (dim,) or (delta is not None and delta.shape != hidden.shape):
        raise KernelArgumentError(
            f"add_rms_norm: hidden {list(hidden.shape)} needs weight [{dim}] and delta {list(hidden.shape)}; "
            f"got weight {list(weight.shape)}" + ("" if delta is None else f" and delta {list(delta.shape)}")
        )
    if _extension.resolve(backend, "add_rms_norm") == "torch":
        return add_rms_norm_torch(hidden, weight, eps, delta)
    ffi, lib = _extension.require()
    out = torch.empty_like(hidden)
    rc = lib.pak_add_rms_norm(ffi.cast("void *", hidden.data_ptr()),
                              ffi.NULL if delta is None else ffi.cast("void *", delta.data_ptr()),
                              ffi.cast("void *", weight.data_ptr()), ffi.cast("void *", out.data_ptr()),
                              _DTYPES[hidden.dtype], rows, dim, eps)
    _extension.check_status(rc, "add_rms_norm")
    return out


def rope_split(qkv: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, heads: int, kv_heads: int, dim: int, *,
               backend: Backend = "auto") -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Rotate-half RoPE on the query and key heads of ``qkv``; return contiguous ``(q, k, v)``.

    Args:
        qkv: ``[tokens, (heads + 2 * kv_heads) * dim]``: query, key and value heads of each token.
        cos, sin: ``[tokens, dim]``, each token's rotation at its position.
        heads, kv_heads, dim: head counts and head size (even).
        backend: "auto", "c" or "torch".

    Returns:
        ``q [tokens, heads, dim]``, ``k [tokens, kv_heads, dim]``, ``v [tokens, kv_heads, dim]``.
    """
    _check("rope_split", qkv.dtype, qkv=qkv, cos=cos, sin=sin)
    tokens = qkv.shape[0]
    if (dim % 2 or qkv.shape[1:] != ((heads + 2 * kv_heads) * dim,) or cos.shape != (tokens, dim)
            or sin.shape != (tokens, dim)):
        raise KernelArgumentError(
            f"rope_split: qkv must be [tokens, {(heads + 2 * kv_heads) * dim}] and cos/sin [tokens, {dim}] "
            f"(dim even); got qkv {list(qkv.shape)}, cos {list(cos.shape)}, sin {list(sin.shape)}"
        )
    if _extension.resolve(backend, "rope_split") == "torch":
        return rope_split_torch(qkv, cos, sin, heads, kv_heads, dim)
    ffi, lib = _extension.require()
    q = qkv.new_empty((tokens, heads, dim))
    k, v = qkv.new_empty((tokens, kv_heads, dim)), qkv.new_empty((tokens, kv_heads, dim))
    rc = lib.pak_rope_split(*(ffi.cast("void *", t.data_ptr()) for t in (qkv, cos, sin, q, k, v)),
                            _DTYPES[qkv.dtype], tokens, heads, kv_heads, dim)
    _extension.check_status(rc, "rope_split")
    return q, k, v


def silu_mul(gate_up: torch.Tensor, *, backend: Backend = "auto") -> torch.Tensor:
    """``silu(gate) * up`` for ``gate_up [tokens, 2 * inter]`` holding ``[gate | up]``; ``[tokens, inter]``."""
    _check("silu_mul", gate_up.dtype, gate_up=gate_up)
    if gate_up.dim() != 2 or gate_up.shape[1] % 2:
        raise KernelArgumentError(f"silu_mul: gate_up must be [tokens, 2 * inter], got {list(gate_up.shape)}")
    if _extension.resolve(backend, "silu_mul") == "torch":
        return silu_mul_torch(gate_up)
    ffi, lib = _extension.require()
    tokens, inter = gate_up.shape[0], gate_up.shape[1] // 2
    out = gate_up.new_empty((tokens, inter))
    rc = lib.pak_silu_mul(ffi.cast("void *", gate_up.data_ptr()), ffi.cast("void *", out.data_ptr()),
                          _DTYPES[gate_up.dtype], tokens, inter)
    _extension.check_status(rc, "silu_mul")
    return out
