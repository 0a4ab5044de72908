"""Argument validation shared by the kernel wrappers, and the errors both backends raise."""

from __future__ import annotations

import torch

from pyagent_kernels.errors import KernelArgumentError


def _shape_text(shape: tuple[int | None, ...]) -> str:
    return (
        "("
        + ", ".join("any" if dim is None else str(dim) for dim in shape)
        + ("," if len(shape) == 1 else "")
        + ")"
    )


def check_tensor(
    value: object,
    name: str,
    *,
    dtypes: tuple[torch.dtype, ...],
    shape: tuple[int | None, ...],
    writable: bool = False,
) -> torch.Tensor:
    """Check that ``value`` is a dense, contiguous CPU tensor of one of ``dtypes`` whose shape
    matches ``shape`` (None: any size); ``writable`` also refuses tensors that require grad.

    Returns the tensor; raises KernelArgumentError saying what is wrong and how to fix it.
    """
    if not isinstance(value, torch.Tensor):
        raise KernelArgumentError(f"{name} must be a torch.Tensor, got {type(value).__name__}")
    if value.layout != torch.strided:
        raise KernelArgumentError(
            f"{name} has layout {value.layout}; pass a dense tensor ({name}.to_dense())"
        )
    if value.device.type != "cpu":
        raise KernelArgumentError(
            f"{name} is on device {value.device}; these kernels run on CPU tensors: pass {name}.cpu()"
        )
    if value.dtype not in dtypes:
        expected = " or ".join(str(dtype) for dtype in dtypes)
        raise KernelArgumentError(
            f"{name} has dtype {value.dtype}; expected {expected}: convert it with .to()"
        )
    if value.dim() != len(shape) or any(
        want not in (None, got) for want, got in zip(shape, value.shape, strict=True)
    ):
        raise KernelArgumentError(f"{name} has shape {tuple(value.shape)}; expected {_shape_text(shape)}")
    if not value.is_contiguous():
        fix = f"make it contiguous first ({name} = {name}.contiguous()" + (
            ", then copy the result back)" if writable else ")"
        )
        raise KernelArgumentError(f"{name} is not contiguous (strides {value.stride()}); {fix}")
    if writable and value.requires_grad:
        raise KernelArgumentError(
            f"{name} requires grad and is modified in place; "
            f"pass {name}.detach() or call under torch.no_grad()"
        )
    return value


def index_error(indices: torch.Tensor, position: int, num_rows: int) -> KernelArgumentError:
    """The error for ``indices[position]`` lying outside ``[0, num_rows)``."""
    value = int(indices[position])
    return KernelArgumentError(
        f"indices[{position}] = {value} is outside [0, {num_rows}); indices must name rows of logits "
        f"(0 <= index < {num_rows}, no negative indexing)"
    )


def first_bad_param_row(
    temperature: torch.Tensor | None, top_p: torch.Tensor | None, min_p: torch.Tensor | None
) -> int | None:
    """First row whose sampling parameters are out of range (the C kernel's PAK_EPARAM rule)."""
    bad: torch.Tensor | None = None
    checks = (
        (temperature, lambda t: ~torch.isfinite(t)),
        (top_p, lambda p: ~((p >= 0) & (p <= 1))),
        (min_p, lambda q: ~((q >= 0) & (q <= 1))),
    )
    for values, is_bad in checks:
        if values is not None:
            bad = is_bad(values) if bad is None else bad | is_bad(values)
    if bad is None or not bool(bad.any()):
        return None
    return int(bad.nonzero()[0, 0])


def param_error(
    row: int, temperature: torch.Tensor | None, top_p: torch.Tensor | None, min_p: torch.Tensor | None
) -> KernelArgumentError:
    """The error for the out-of-range sampling parameter of ``row``."""
    if temperature is not None and not torch.isfinite(temperature[row]):
        problem = f"temperature[{row}] = {float(temperature[row])} must be finite (<= 0 or 1: no scaling)"
    elif top_p is not None and not 0 <= float(top_p[row]) <= 1:
        problem = f"top_p[{row}] = {float(top_p[row])} must lie in [0, 1] (1 disables top-p)"
    elif min_p is not None and not 0 <= float(min_p[row]) <= 1:
        problem = f"min_p[{row}] = {float(min_p[row])} must lie in [0, 1] (0 disables min-p)"
    else:
        problem = f"the parameters of row {row} are out of range"
    return KernelArgumentError(f"apply_sampling_mask: {problem}")


def nonfinite_logits_error(row: int) -> KernelArgumentError:
    """The error for a NaN or +inf logit (before or after temperature scaling) in ``row``."""
    return KernelArgumentError(
        f"apply_sampling_mask: logits row {row} contains NaN or +inf (possibly after dividing by a tiny "
        "temperature); use -inf for banned tokens and check the model output. Rows before it may "
        "already have been modified"
    )
