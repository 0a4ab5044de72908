"""Batch-invariant linear layers: ``x @ weight.T`` where a row's bits never depend on its batch.

Every output element is summed in one fixed order that depends only on the inner size (see
``include/pyagent/linear.h``): 16 float32 lanes of fused multiply-adds, then a fixed tree. Which
rows share the call, how the C kernel tiles the work and how many threads run it change nothing,
so a sequence gives the same tokens alone or batched. bfloat16 is multiplied exactly in float32
and rounded once (nearest, ties to even); on CPUs with AVX-512 BF16 the dot-product instruction
does the work. Every instruction-set variant gives the same bits for normal numbers.

The weight may also be a :class:`~pyagent_kernels.quantized.QuantizedWeight` (GGUF Q4_0, Q4_1, Q5_0,
Q5_1, Q8_0, Q4_K, Q5_K or Q6_K blocks), multiplied in one of two precisions, a stated choice:

- ``"int8"`` (the default): llama.cpp's way. Each input row is quantized once per call into int8
  blocks (llama.cpp's Q8_0, per 32 values, for every format), multiplied with the weights' integer
  codes in exact integer arithmetic (AVX-512 VNNI, AVX-VNNI, AVX2, AMX where proven usable, or C),
  and the float scales are applied in one documented order (``include/pyagent/linear_int8.h``): every
  variant gives the same bits, batch-invariant. It reads the GGUF file's bytes and no more.
- ``"exact"``: the weights decoded to their dequantized float values and multiplied in the dense
  order above: the bits of the product with the dequantized matrix (the reference that comparisons
  with transformers use), reading 5 to 10 bits per weight.

Dense weights are always multiplied in float; ``precision`` concerns quantized weights only.

The pure-torch fallback (:mod:`pyagent_kernels._linear_torch`) is batch-invariant too but sums in
another order, so its bits differ from the C kernel's. :func:`prepare_linear` checks a product on
buffers a caller reuses every step once and returns it ready to run.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal, get_args

import torch

from pyagent_kernels import _extension
from pyagent_kernels._checks import check_separate, check_tensor, check_threads
from pyagent_kernels._extension import Backend, PreparedCall
from pyagent_kernels._fast_checks import all_plain
from pyagent_kernels._int8_layout import GGUF_BLOCKS
from pyagent_kernels._linear_int8_torch import linear_int8_torch
from pyagent_kernels._linear_torch import linear_torch
from pyagent_kernels.errors import KernelArgumentError
from pyagent_kernels.quantized import QuantizedWeight

__all__ = ["DEFAULT_PRECISION", "PRECISIONS", "Precision", "linear", "prepare_linear"]

#: How a product with a quantized weight is computed (see the module docstring).
Precision = Literal["exact", "int8"]
PRECISIONS: tuple[str, ...] = get_args(Precision)
#: The precision of products with quantized weights unless a caller states one.
DEFAULT_PRECISION: Precision = "int8"

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
    return out_dtype, check_threads(threads)


def _check_precision(precision: str) -> None:
    if precision not in PRECISIONS:
        raise KernelArgumentError(f"precision={precision!r} is not one of {', '.join(PRECISIONS)}")


def _int8(weight: torch.Tensor | QuantizedWeight, precision: str) -> bool:
    """Whether the product runs on the int8 path (a quantized weight at precision "int8")."""
    return precision == "int8" and isinstance(weight, QuantizedWeight)


def _c_call(ext: _extension.Extension, x: torch.Tensor, weight: torch.Tensor | QuantizedWeight, out: torch.Tensor,
            threads: int) -> tuple[Callable[..., int], tuple[object, ...]]:
    """The C function computing ``out = x @ weight.T`` in float (exact) and its arguments (checked tensors)."""
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


def _int8_c_call(ext: _extension.Extension, x: torch.Tensor, weight: QuantizedWeight, out: torch.Tensor,
                 threads: int, scratch: bool) -> tuple[Callable[..., int], tuple[object, ...]]:
    """The C function computing ``out = x @ weight.T`` on the int8 path and its arguments; with
    ``scratch`` the quantized activations go into a buffer allocated now (kept in the arguments), else
    the kernel allocates them per call."""
    ffi, lib = ext.ffi, ext.lib
    rows, inner = x.shape
    groups = weight.int8_parts()
    parts = ffi.new("pak_int8_part[]", len(groups))
    for part, (fmt, rows_of, count) in zip(parts, groups, strict=True):
        part.w = ffi.cast("uint8_t *", rows_of.data_ptr())
        part.wtype = GGUF_BLOCKS[fmt][0]
        part.out = count
    buffer = ffi.NULL
    if scratch:
        size = lib.pak_int8_scratch_bytes(parts, len(groups), rows, inner)
        buffer = ffi.new("uint8_t[]", max(size, 1)) if size else ffi.NULL
    return lib.pak_linear_int8, (ffi.cast("void *", x.data_ptr()), x.dtype is torch.bfloat16, parts, len(groups),
                                 ffi.cast("void *", out.data_ptr()), out.dtype is torch.float32, rows, inner,
                                 buffer, threads)


def _torch(x: torch.Tensor, weight: torch.Tensor | QuantizedWeight, out_dtype: torch.dtype,
           precision: str) -> torch.Tensor:
    """The fallback's result."""
    if _int8(weight, precision):
        assert isinstance(weight, QuantizedWeight)
        weight.int8_parts()  # raises for weights without GGUF blocks
        parts = weight.gguf_parts
        assert parts is not None
        return linear_int8_torch(x, parts).to(out_dtype)
    dense = weight.dequantize(x.dtype) if isinstance(weight, QuantizedWeight) else weight
    return linear_torch(x, dense).to(out_dtype)


def linear(x: torch.Tensor, weight: torch.Tensor | QuantizedWeight, *, out_dtype: torch.dtype | None = None,
           threads: int | None = None, backend: Backend = "auto",
           precision: Precision = DEFAULT_PRECISION) -> torch.Tensor:
    """Return ``x @ weight.T`` (``[rows, out]``), batch-invariant.

    Args:
        x: float32 or bfloat16 ``[rows, in]``, contiguous, on CPU.
        weight: ``[out, in]``, the same dtype, contiguous, on CPU; or a :class:`QuantizedWeight`.
        out_dtype: the result's dtype: the inputs' (default) or float32. With bfloat16 inputs,
            float32 keeps the sums unrounded (logits: rounding them to bfloat16 makes ties); the
            torch fallback rounds to bfloat16 first (on the int8 path it rounds the same sums).
        threads: threads the C kernel may use (default: ``torch.get_num_threads()``).
        backend: "auto" (C if built, else torch with a one-time warning), "c" or "torch".
        precision: for a quantized weight, "int8" (default) or "exact" (see the module docstring).

    Raises:
        KernelArgumentError: a tensor has the wrong type, dtype, shape, layout or device; an unknown
            precision; "int8" for a K-quant weight built from exact-layout rows.
        KernelUnavailableError: backend="c" but the extension is not built.
    """
    if not _plain(x, weight):
        _check(x, weight)
    _check_precision(precision)
    out_dtype, threads = _settings(x, out_dtype, threads)
    ext = _extension.c_extension(backend, "linear")
    if ext is None:
        return _torch(x, weight, out_dtype, precision)
    out = torch.empty(x.shape[0], weight.shape[0], dtype=out_dtype)
    if _int8(weight, precision):
        assert isinstance(weight, QuantizedWeight)
        _extension.run_call(*_int8_c_call(ext, x, weight, out, threads, scratch=False), "linear")
    else:
        _extension.run_call(*_c_call(ext, x, weight, out, threads), "linear")
    return out


def prepare_linear(x: torch.Tensor, weight: torch.Tensor | QuantizedWeight, out: torch.Tensor, *,
                   threads: int | None = None, backend: Backend = "auto",
                   precision: Precision = DEFAULT_PRECISION) -> PreparedCall:
    """``out[:] = linear(x, weight, out_dtype=out.dtype, threads=threads, precision=precision)`` as a call
    checked once, for buffers a caller reuses every step (run it with :func:`pyagent_kernels.run_prepared`).

    Args:
        x, weight, threads, backend, precision: as for :func:`linear` (``threads`` resolved now; on the
            int8 path the buffer for the quantized activations is allocated now).
        out: ``[rows, out]`` of ``x``'s dtype or float32, contiguous, on CPU.

    Raises:
        KernelArgumentError, KernelUnavailableError: as :func:`linear`, and for an ``out`` that does
            not fit.
    """
    if not _plain(x, weight):
        _check(x, weight)
    _check_precision(precision)
    check_tensor(out, "out", dtypes=(x.dtype, torch.float32), shape=(x.shape[0], weight.shape[0]), writable=True)
    int8 = _int8(weight, precision)
    if isinstance(weight, QuantizedWeight):
        matrices = {f"weight part {i}": rows for i, (_, rows, _) in enumerate(weight.int8_parts())} if int8 else {
            "weight": weight.packed}
    else:
        matrices = {"weight": weight}
    check_separate("linear", {"out": out}, {"x": x, **matrices})
    out_dtype, threads = _settings(x, out.dtype, threads)
    ext = _extension.c_extension(backend, "linear")
    if ext is None:
        return _extension.torch_call("linear", lambda: _torch(x, weight, out_dtype, precision), (out,),
                                     (x, weight, out))
    if int8:
        assert isinstance(weight, QuantizedWeight)
        function, arguments = _int8_c_call(ext, x, weight, out, threads, scratch=True)
    else:
        function, arguments = _c_call(ext, x, weight, out, threads)
    return PreparedCall(function, arguments, "linear", (x, weight, out))
