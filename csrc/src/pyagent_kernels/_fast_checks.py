"""A cheap test for the common case of ``_checks.check_tensor``, for wrappers called every step."""

from __future__ import annotations

import torch

from pyagent_kernels._checks import check_tensor


def check_plain(value: object, name: str, dtype: torch.dtype, shape: tuple[int | None, ...],
                writable: bool = False) -> None:
    """``check_tensor(value, name, dtypes=(dtype,), shape=shape, writable=writable)``, answered in
    a few attribute reads when ``value`` is a plain tensor that passes (a wrapper's usual case);
    anything else goes through ``check_tensor``, which raises the detailed error."""
    if (
        type(value) is torch.Tensor
        and value.dtype == dtype
        and value.is_cpu
        and value.layout == torch.strided
        and value.is_contiguous()
        and not (writable and value.requires_grad)
    ):
        dims = value.shape
        if len(dims) == len(shape):
            for want, got in zip(shape, dims, strict=True):
                if want is not None and want != got:
                    break
            else:
                return
    check_tensor(value, name, dtypes=(dtype,), shape=shape, writable=writable)
