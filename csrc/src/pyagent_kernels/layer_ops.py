"""The small operations between a decoder layer's matrix products, one call each (C or torch).

``add_rms_norm`` adds a residual in place and normalizes, ``rope_split`` rotates the query and key
heads of a fused q/k/v projection and splits it, ``silu_mul`` is SwiGLU's activation. Each costs
one C call instead of several torch dispatches (the semantics are in ``include/pyagent/layer_ops.h``);
every row is computed alone, so results depend neither on the batch nor on ``threads`` (a large call,
a prefill's, shares its rows over up to that many threads; default ``torch.get_num_threads()``). The
torch fallbacks (:mod:`pyagent_kernels._layer_ops_torch`) give rope_split's bits and agree with the
others to a few float32 ulp. ``prepare_*`` checks a call on buffers a caller reuses every step once and
returns it ready to run (:func:`pyagent_kernels.run_prepared`), writing the result into an ``out`` buffer.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from pyagent_kernels import _extension
from pyagent_kernels._checks import check_separate, check_threads
from pyagent_kernels._extension import Backend, PreparedCall
from pyagent_kernels._fast_checks import all_plain
from pyagent_kernels._layer_ops_torch import add_rms_norm_torch, rope_split_torch, silu_mul_torch
from pyagent_kernels.errors import KernelArgumentError

__all__ = ["add_rms_norm", "prepare_add_rms_norm", "prepare_rope_split", "prepare_silu_mul", "rope_split", "silu_mul"]

_DTYPES = {torch.float32: 0, torch.bfloat16: 1}


def _plain(dtype: torch.dtype, *tensors: object) -> bool:
    """Whether every tensor passes :func:`_check` (a contiguous CPU tensor of ``dtype``, float32 or
    bfloat16), answered in a few attribute reads for plain tensors; False sends the call through
    :func:`_check` for its error."""
    return dtype in _DTYPES and all_plain(dtype, *tensors)


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


def _check_out(kernel: str, dtype: torch.dtype, shape: tuple[int, ...], **buffers: torch.Tensor) -> None:
    """A prepared call's output buffers: contiguous CPU tensors of ``dtype`` and ``shape``."""
    _check(kernel, dtype, **buffers)
    for name, buffer in buffers.items():
        if buffer.shape != shape or buffer.requires_grad:
            raise KernelArgumentError(
                f"{kernel}: {name} must be {list(shape)} and not require grad (it is written in place); "
                f"got {list(buffer.shape)}" + (" requiring grad" if buffer.requires_grad else "")
            )


def _check_norm(hidden: torch.Tensor, weight: torch.Tensor, delta: torch.Tensor | None) -> None:
    """add_rms_norm's argument checks."""
    dtype = hidden.dtype
    if not _plain(dtype, hidden, weight, hidden if delta is None else delta):
        _check("add_rms_norm", dtype, hidden=hidden, weight=weight, **({} if delta is None else {"delta": delta}))
    _, dim = hidden.shape
    if weight.shape != (dim,) or (delta is not None and delta.shape != hidden.shape):
        raise KernelArgumentError(
            f"add_rms_norm: hidden {list(hidden.shape)} needs weight [{dim}] and delta {list(hidden.shape)}; "
            f"got weight {list(weight.shape)}" + ("" if delta is None else f" and delta {list(delta.shape)}")
        )


def _norm_call(ext: _extension.Extension, hidden: torch.Tensor, weight: torch.Tensor, eps: float,
               delta: torch.Tensor | None, out: torch.Tensor,
               threads: int | None) -> tuple[Callable[..., int], tuple[object, ...]]:
    ffi = ext.ffi
    rows, dim = hidden.shape
    return ext.lib.pak_add_rms_norm, (
        ffi.cast("void *", hidden.data_ptr()), ffi.NULL if delta is None else ffi.cast("void *", delta.data_ptr()),
        ffi.cast("void *", weight.data_ptr()), ffi.cast("void *", out.data_ptr()), _DTYPES[hidden.dtype], rows, dim,
        eps, check_threads(threads),
    )


def add_rms_norm(hidden: torch.Tensor, weight: torch.Tensor, eps: float, delta: torch.Tensor | None = None, *,
                 threads: int | None = None, backend: Backend = "auto") -> torch.Tensor:
    """With ``delta``, ``hidden += delta`` in place; return RMSNorm(``hidden``) * ``weight``.

    Args:
        hidden: ``[rows, dim]``; modified in place when ``delta`` is given.
        weight: ``[dim]``, the same dtype.
        eps: added to the mean square.
        delta: ``[rows, dim]`` or ``None``.
        threads: most threads the C call may use (default: ``torch.get_num_threads()``).
        backend: "auto", "c" or "torch".
    """
    _check_norm(hidden, weight, delta)
    ext = _extension.c_extension(backend, "add_rms_norm")
    if ext is None:
        return add_rms_norm_torch(hidden, weight, eps, delta)
    out = torch.empty_like(hidden)
    _extension.run_call(*_norm_call(ext, hidden, weight, eps, delta, out, threads), "add_rms_norm")
    return out


def prepare_add_rms_norm(hidden: torch.Tensor, weight: torch.Tensor, eps: float, delta: torch.Tensor | None,
                         out: torch.Tensor, *, threads: int | None = None, backend: Backend = "auto") -> PreparedCall:
    """``out[:] = add_rms_norm(hidden, weight, eps, delta)`` as a call checked once, for buffers a caller
    reuses every step; ``out`` is like ``hidden`` (contiguous, on CPU)."""
    _check_norm(hidden, weight, delta)
    _check_out("add_rms_norm", hidden.dtype, hidden.shape, out=out)
    check_separate("add_rms_norm", {"out": out},
                   {"hidden": hidden, "weight": weight} | ({} if delta is None else {"delta": delta}))
    ext = _extension.c_extension(backend, "add_rms_norm")
    if ext is None:
        return _extension.torch_call("add_rms_norm", lambda: add_rms_norm_torch(hidden, weight, eps, delta), (out,),
                                     (hidden, weight, delta, out))
    return PreparedCall(*_norm_call(ext, hidden, weight, eps, delta, out, threads), "add_rms_norm",
                        (hidden, weight, delta, out))


def _check_rope(qkv: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, heads: int, kv_heads: int, dim: int) -> None:
    """rope_split's argument checks."""
    dtype = qkv.dtype
    if not _plain(dtype, qkv, cos, sin):
        _check("rope_split", dtype, qkv=qkv, cos=cos, sin=sin)
    tokens = qkv.shape[0]
    if (dim % 2 or qkv.shape[1:] != ((heads + 2 * kv_heads) * dim,) or cos.shape != (tokens, dim)
            or sin.shape != (tokens, dim)):
        raise KernelArgumentError(
            f"rope_split: qkv must be [tokens, {(heads + 2 * kv_heads) * dim}] and cos/sin [tokens, {dim}] "
            f"(dim even); got qkv {list(qkv.shape)}, cos {list(cos.shape)}, sin {list(sin.shape)}"
        )


def _rope_call(ext: _extension.Extension, qkv: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, q: torch.Tensor,
               k: torch.Tensor, v: torch.Tensor, threads: int | None) -> tuple[Callable[..., int], tuple[object, ...]]:
    ffi = ext.ffi
    tokens, heads, dim = q.shape
    return ext.lib.pak_rope_split, (
        ffi.cast("void *", qkv.data_ptr()), ffi.cast("void *", cos.data_ptr()), ffi.cast("void *", sin.data_ptr()),
        ffi.cast("void *", q.data_ptr()), ffi.cast("void *", k.data_ptr()), ffi.cast("void *", v.data_ptr()),
        _DTYPES[qkv.dtype], tokens, heads, k.shape[1], dim, check_threads(threads),
    )


def rope_split(qkv: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, heads: int, kv_heads: int, dim: int, *,
               threads: int | None = None,
               backend: Backend = "auto") -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Rotate-half RoPE on the query and key heads of ``qkv``; return contiguous ``(q, k, v)``.

    Args:
        qkv: ``[tokens, (heads + 2 * kv_heads) * dim]``: query, key and value heads of each token.
        cos, sin: ``[tokens, dim]``, each token's rotation at its position.
        heads, kv_heads, dim: head counts and head size (even).
        threads: most threads the C call may use (default: ``torch.get_num_threads()``).
        backend: "auto", "c" or "torch".

    Returns:
        ``q [tokens, heads, dim]``, ``k [tokens, kv_heads, dim]``, ``v [tokens, kv_heads, dim]``.
    """
    _check_rope(qkv, cos, sin, heads, kv_heads, dim)
    ext = _extension.c_extension(backend, "rope_split")
    if ext is None:
        return rope_split_torch(qkv, cos, sin, heads, kv_heads, dim)
    tokens = qkv.shape[0]
    q = qkv.new_empty((tokens, heads, dim))
    k, v = qkv.new_empty((tokens, kv_heads, dim)), qkv.new_empty((tokens, kv_heads, dim))
    _extension.run_call(*_rope_call(ext, qkv, cos, sin, q, k, v, threads), "rope_split")
    return q, k, v


def prepare_rope_split(qkv: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, heads: int, kv_heads: int, dim: int,
                       out: tuple[torch.Tensor, torch.Tensor, torch.Tensor], *, threads: int | None = None,
                       backend: Backend = "auto") -> PreparedCall:
    """``out[i][:] = rope_split(qkv, cos, sin, heads, kv_heads, dim)[i]`` as a call checked once, for
    buffers a caller reuses every step; ``out`` holds contiguous CPU ``q``, ``k``, ``v`` of their shapes."""
    _check_rope(qkv, cos, sin, heads, kv_heads, dim)
    tokens = qkv.shape[0]
    q, k, v = out
    _check_out("rope_split", qkv.dtype, (tokens, heads, dim), q=q)
    _check_out("rope_split", qkv.dtype, (tokens, kv_heads, dim), k=k, v=v)
    check_separate("rope_split", {"q": q, "k": k, "v": v}, {"qkv": qkv, "cos": cos, "sin": sin})
    ext = _extension.c_extension(backend, "rope_split")
    if ext is None:
        return _extension.torch_call("rope_split", lambda: rope_split_torch(qkv, cos, sin, heads, kv_heads, dim), out,
                                     (qkv, cos, sin, *out))
    return PreparedCall(*_rope_call(ext, qkv, cos, sin, q, k, v, threads), "rope_split", (qkv, cos, sin, *out))


def _check_silu(gate_up: torch.Tensor) -> None:
    """silu_mul's argument checks."""
    dtype = gate_up.dtype
    if not _plain(dtype, gate_up):
        _check("silu_mul", dtype, gate_up=gate_up)
    if gate_up.dim() != 2 or gate_up.shape[1] % 2:
        raise KernelArgumentError(f"silu_mul: gate_up must be [tokens, 2 * inter], got {list(gate_up.shape)}")


def _silu_call(ext: _extension.Extension, gate_up: torch.Tensor, out: torch.Tensor,
               threads: int | None) -> tuple[Callable[..., int], tuple[object, ...]]:
    ffi = ext.ffi
    tokens, inter = out.shape
    return ext.lib.pak_silu_mul, (ffi.cast("void *", gate_up.data_ptr()), ffi.cast("void *", out.data_ptr()),
                                  _DTYPES[gate_up.dtype], tokens, inter, check_threads(threads))


def silu_mul(gate_up: torch.Tensor, *, threads: int | None = None, backend: Backend = "auto") -> torch.Tensor:
    """``silu(gate) * up`` for ``gate_up [tokens, 2 * inter]`` holding ``[gate | up]``; ``[tokens, inter]``
    (the C call on up to ``threads`` threads, default ``torch.get_num_threads()``)."""
    _check_silu(gate_up)
    ext = _extension.c_extension(backend, "silu_mul")
    if ext is None:
        return silu_mul_torch(gate_up)
    out = gate_up.new_empty((gate_up.shape[0], gate_up.shape[1] // 2))
    _extension.run_call(*_silu_call(ext, gate_up, out, threads), "silu_mul")
    return out


def prepare_silu_mul(gate_up: torch.Tensor, out: torch.Tensor, *, threads: int | None = None,
                     backend: Backend = "auto") -> PreparedCall:
    """``out[:] = silu_mul(gate_up)`` as a call checked once, for buffers a caller reuses every step;
    ``out`` is a contiguous CPU ``[tokens, inter]`` of ``gate_up``'s dtype."""
    _check_silu(gate_up)
    _check_out("silu_mul", gate_up.dtype, (gate_up.shape[0], gate_up.shape[1] // 2), out=out)
    check_separate("silu_mul", {"out": out}, {"gate_up": gate_up})
    ext = _extension.c_extension(backend, "silu_mul")
    if ext is None:
        return _extension.torch_call("silu_mul", lambda: silu_mul_torch(gate_up), (out,), (gate_up, out))
    return PreparedCall(*_silu_call(ext, gate_up, out, threads), "silu_mul", (gate_up, out))
