"""Cheap tests for the common case of the wrappers' checks, for wrappers called every step: a few
attribute reads when the tensors are plain and fit; anything else goes through the detailed checks,
which raise the error."""

from __future__ import annotations

import torch

from pyagent_kernels._checks import check_tensor


def all_plain(dtype: torch.dtype, *tensors: object) -> bool:
    """Whether every one of ``tensors`` is a plain (not a subclass), dense, contiguous CPU tensor of
    ``dtype``."""
    for tensor in tensors:
        if not (type(tensor) is torch.Tensor and tensor.dtype is dtype and tensor.is_cpu
                and tensor.layout is torch.strided and tensor.is_contiguous()):
            return False
    return True


def check_plain(value: object, name: str, dtype: torch.dtype, shape: tuple[int | None, ...],
                writable: bool = False) -> None:
    """``check_tensor(value, name, dtypes=(dtype,), shape=shape, writable=writable)``, answered in
    a few attribute reads when ``value`` is a plain tensor that passes (a wrapper's usual case);
    anything else goes through ``check_tensor``, which raises the detailed error."""
    if type(value) is torch.Tensor and all_plain(dtype, value) and not (writable and value.requires_grad):
        dims = value.shape
        if len(dims) == len(shape):
            for want, got in zip(shape, dims, strict=True):
                if want is not None and want != got:
                    break
            else:
                return
    check_tensor(value, name, dtypes=(dtype,), shape=shape, writable=writable)
