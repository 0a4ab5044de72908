"""Batch-invariant linear layers: ``x @ weight.T`` where a row's bits never depend on its batch.

Every output element is summed in one fixed order that depends only on the inner size (see
``include/pyagent/linear.h``): 16 float32 lanes of fused multiply-adds, then a fixed tree. Which
rows share the call, how the C kernel tiles the work and how many threads run it change nothing,
so a sequence gives the same tokens alone or batched. bfloat16 is multiplied exactly in float32
and rounded once (nearest, ties to even); on CPUs with AVX-512 BF16 the dot-product instruction
does the work. Every instruction-set variant gives the same bits for normal numbers.

The weight may also be a :class:`~pyagent_kernels.quantized.QuantizedWeight` (GGUF Q4_0, Q4_1, Q5_0,
Q5_1, Q8_0, Q4_K, Q5_K or Q6_K blocks): the kernel decodes it as it goes and gives the bits of the
product with the dequantized matrix, reading 5 to 10 bits per weight instead of 16 or 32.

The pure-torch fallback (:mod:`pyagent_kernels._linear_torch`) is batch-invariant too but sums in
another order, so its bits differ from the C kernel's. :func:`prepare_linear` checks a product on
buffers a caller reuses every step once and returns it ready to run.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from pyagent_kernels import _extension
from pyagent_kernels._checks import check_separate, check_tensor
from pyagent_kernels._extension import Backend, PreparedCall
from pyagent_kernels._fast_checks import all_plain
from pyagent_kernels._linear_torch import linear_torch
from pyagent_kernels.errors import KernelArgumentError
from pyagent_kernels.quantized import QuantizedWeight

__all__ = ["linear", "prepare_linear"]

_POINTERS = {torch.float32: "float *", torch.bfloat16: "uint16_t *"}


def _plain(x: object, weight: object) -> bool:
    """Whether ``linear`` can take ``x`` and ``weight`` as they are: the checks of :func:`_check`
    in a few attribute reads for plain tensors (or a :class:`QuantizedWeight`, checked when built);
    False sends anything else through :func:`_check` for its error."""
    if not (type(x) is torch.Tensor and x.dtype in _POINTERS and all_plain(x.dtype, x) and x.dim() == 2):
        return False
    if type(weight) is QuantizedWeight:
        return x.shape[1] == weight.in_features
    return (type(weight) is torch.Tensor and all_plain(x.dtype, weight) and weight.dim() == 2
            and x.shape[1] == weight.shape[1])


def _check(x: object, weight: object) -> None:
    dense = (("x", x),) if isinstance(weight, QuantizedWeight) else (("x", x), ("weight", weight))
    for name, value in dense:
        if not isinstance(value, torch.Tensor):
            raise KernelArgumentError(f"{name} must be a torch.Tensor, got {type(value).__name__}")
        if value.dim() != 2:
            raise KernelArgumentError(f"{name} has shape {tuple(value.shape)}; expected 2 dimensions")
        if value.dtype not in _POINTERS:
            raise KernelArgumentError(f"{name} has dtype {value.dtype}; expected torch.float32 or torch.bfloat16")
        if value.device.type != "cpu" or value.layout != torch.strided:
            raise KernelArgumentError(f"{name} must be a dense CPU tensor; pass {name}.cpu()")
        if not value.is_contiguous():
            raise KernelArgumentError(f"{name} is not contiguous; pass {name}.contiguous()")
    assert isinstance(x, torch.Tensor) and isinstance(weight, torch.Tensor | QuantizedWeight)
    if isinstance(weight, torch.Tensor) and x.dtype != weight.dtype:
        raise KernelArgumentError(f"x has dtype {x.dtype} but weight has {weight.dtype}; convert one with .to()")
    if x.shape[1] != weight.shape[1]:
        raise KernelArgumentError(
            f"x has {x.shape[1]} features per row but weight [out, in] has in = {weight.shape[1]}"
        )


def _settings(x: torch.Tensor, out_dtype: torch.dtype | None, threads: int | None) -> tuple[torch.dtype, int]:
    """``out_dtype`` and ``threads`` with their defaults filled in, checked."""
    if out_dtype is None:
        out_dtype = x.dtype
    elif out_dtype not in (x.dtype, torch.float32):
        raise KernelArgumentError(f"out_dtype must be {x.dtype} or torch.float32, got {out_dtype}")
    if threads is None:
        threads = torch.get_num_threads()
    if threads < 1:
        raise KernelArgumentError(f"threads must be at least 1, got {threads}")
    return out_dtype, threads


def _c_call(ext: _extension.Extension, x: torch.Tensor, weight: torch.Tensor | QuantizedWeight, out: torch.Tensor,
            threads: int) -> tuple[Callable[..., int], tuple[object, ...]]:
    """The C function computing ``out = x @ weight.T`` and its arguments (checked tensors)."""
    ffi, lib = ext.ffi, ext.lib
    rows, inner = x.shape
    out_features = weight.shape[0]
    pointer = _POINTERS[x.dtype]
    x_ptr, y_ptr = ffi.cast(pointer, x.data_ptr()), ffi.cast("void *", out.data_ptr())
    y_f32 = out.dtype is torch.float32
    if isinstance(weight, QuantizedWeight):
        w_ptr = ffi.cast("uint8_t *", weight.packed.data_ptr())
        if x.dtype is torch.float32:
            return lib.pak_linear_quant_f32, (x_ptr, w_ptr, weight.type_id, y_ptr, rows, out_features, inner, threads)
        return lib.pak_linear_quant_bf16, (x_ptr, w_ptr, weight.type_id, y_ptr, y_f32, rows, out_features, inner,
                                           threads)
    w_ptr = ffi.cast(pointer, weight.data_ptr())
    if x.dtype is torch.float32:
        return lib.pak_linear_f32, (x_ptr, w_ptr, y_ptr, rows, out_features, inner, threads)
    return lib.pak_linear_bf16, (x_ptr, w_ptr, y_ptr, y_f32, rows, out_features, inner, threads)


def _torch(x: torch.Tensor, weight: torch.Tensor | QuantizedWeight, out_dtype: torch.dtype) -> torch.Tensor:
    """The fallback's result."""
    dense = weight.dequantize(x.dtype) if isinstance(weight, QuantizedWeight) else weight
    return linear_torch(x, dense).to(out_dtype)


def linear(x: torch.Tensor, weight: torch.Tensor | QuantizedWeight, *, out_dtype: torch.dtype | None = None,
           threads: int | None = None, backend: Backend = "auto") -> torch.Tensor:
    """Return ``x @ weight.T`` (``[rows, out]``), batch-invariant.

    Args:
        x: float32 or bfloat16 ``[rows, in]``, contiguous, on CPU.
        weight: ``[out, in]``, the same dtype, contiguous, on CPU; or a :class:`QuantizedWeight`.
        out_dtype: the result's dtype: the inputs' (default) or float32. With bfloat16 inputs,
            float32 keeps the sums unrounded (logits: rounding them to bfloat16 makes ties); the
            torch fallback rounds to bfloat16 first.
        threads: threads the C kernel may use (default: ``torch.get_num_threads()``).
        backend: "auto" (C if built, else torch with a one-time warning), "c" or "torch".

    Raises:
        KernelArgumentError: a tensor has the wrong type, dtype, shape, layout or device.
        KernelUnavailableError: backend="c" but the extension is not built.
    """
    if not _plain(x, weight):
        _check(x, weight)
    out_dtype, threads = _settings(x, out_dtype, threads)
    ext = _extension.c_extension(backend, "linear")
    if ext is None:
        return _torch(x, weight, out_dtype)
    out = torch.empty(x.shape[0], weight.shape[0], dtype=out_dtype)
    _extension.run_call(*_c_call(ext, x, weight, out, threads), "linear")
    return out


def prepare_linear(x: torch.Tensor, weight: torch.Tensor | QuantizedWeight, out: torch.Tensor, *,
                   threads: int | None = None, backend: Backend = "auto") -> PreparedCall:
    """``out[:] = linear(x, weight, out_dtype=out.dtype, threads=threads)`` as a call checked once, for
    buffers a caller reuses every step (run it with :func:`pyagent_kernels.run_prepared`).

    Args:
        x, weight, threads, backend: as for :func:`linear` (``threads`` resolved now).
        out: ``[rows, out]`` of ``x``'s dtype or float32, contiguous, on CPU.

    Raises:
        KernelArgumentError, KernelUnavailableError: as :func:`linear`, and for an ``out`` that does
            not fit.
    """
    if not _plain(x, weight):
        _check(x, weight)
    check_tensor(out, "out", dtypes=(x.dtype, torch.float32), shape=(x.shape[0], weight.shape[0]), writable=True)
    matrix = weight.packed if isinstance(weight, QuantizedWeight) else weight
    check_separate("linear", {"out": out}, {"x": x, "weight": matrix})
    out_dtype, threads = _settings(x, out.dtype, threads)
    ext = _extension.c_extension(backend, "linear")
    if ext is None:
        return _extension.torch_call("linear", lambda: _torch(x, weight, out_dtype), (out,), (x, weight, out))
    return PreparedCall(*_c_call(ext, x, weight, out, threads), "linear", (x, weight, out))
