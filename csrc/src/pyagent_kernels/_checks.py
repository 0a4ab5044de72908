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


def check_separate(kernel: str, written: dict[str, torch.Tensor], read: dict[str, torch.Tensor]) -> None:
    """Raise KernelArgumentError when a buffer that ``kernel`` writes shares memory with another of
    its tensors (all contiguous): the kernels read and write separate buffers."""
    spans = {name: (t.data_ptr(), t.data_ptr() + t.numel() * t.element_size()) for name, t in (written | read).items()}
    others = list(spans)
    for name in written:
        start, end = spans[name]
        others.remove(name)
        for other in others:
            other_start, other_end = spans[other]
            if start < other_end and other_start < end:
                raise KernelArgumentError(
                    f"{kernel}: {name} shares memory with {other}; write the result into a separate buffer"
                )


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


def paged_metadata_error(
    num_blocks: int,
    block_size: int,
    block_tables: torch.Tensor,
    slot_mapping: torch.Tensor,
    seq_lens: torch.Tensor,
    query_start_loc: torch.Tensor,
    tree_mask: torch.Tensor | None,
) -> KernelArgumentError | None:
    """The error for paged-attention metadata whose values break the cache layout, or None.

    Checks what the C kernel checks (PAK_EPARAM / PAK_EINDEX in ``pyagent/attention.h``):
    query_start_loc runs from 0 to num_tokens without decreasing, each sequence holds its new tokens
    and fits its block-table row (and the tree mask's width), the block ids it reads and every slot
    lie inside the cache.
    """
    starts = query_start_loc.long()
    num_tokens = slot_mapping.shape[0]
    if int(starts[0]) != 0 or int(starts[-1]) != num_tokens:
        return KernelArgumentError(
            f"paged_attention: query_start_loc must start at 0 and end at num_tokens ({num_tokens}), "
            f"got {int(starts[0])} ... {int(starts[-1])}"
        )
    query_lens = starts.diff()
    lens = seq_lens.long()
    blocks = (lens + block_size - 1).div(block_size, rounding_mode="floor")
    max_blocks = block_tables.shape[1]
    checks = [
        (query_lens < 0, "query_start_loc decreases at sequence {s}"),
        (lens < query_lens, "seq_lens[{s}] is smaller than its number of new tokens"),
        (blocks > max_blocks, f"seq_lens[{{s}}] needs more than the block table's {max_blocks} blocks of "
         f"{block_size} positions"),
    ]
    if tree_mask is not None:
        checks.append((query_lens > tree_mask.shape[1],
                       f"sequence {{s}} has more new tokens than tree_mask's {tree_mask.shape[1]} columns"))
    used = torch.arange(max_blocks).unsqueeze(0) < blocks.unsqueeze(1)
    checks.append((
        (used & ((block_tables < 0) | (block_tables >= num_blocks))).any(dim=1),
        f"block_tables row {{s}} names a block outside [0, {num_blocks}) among the blocks it uses",
    ))
    for bad, message in checks:
        found = bad.nonzero()
        if len(found):
            return KernelArgumentError(f"paged_attention: {message.format(s=int(found[0, 0]))}")
    num_slots = num_blocks * block_size
    found = ((slot_mapping < 0) | (slot_mapping >= num_slots)).nonzero()
    if len(found):
        t = int(found[0, 0])
        return KernelArgumentError(
            f"paged_attention: slot_mapping[{t}] = {int(slot_mapping[t])} is outside the cache's "
            f"{num_slots} slots (num_blocks * block_size)"
        )
    return None


def unselectable_row_error(kernel: str, row: int) -> KernelArgumentError:
    """The error of a token selector (``kernel``) for a logits row with NaN / +inf or nothing finite to choose."""
    return KernelArgumentError(
        f"{kernel}: logits row {row} holds NaN or +inf, or only -inf (every token masked); "
        "check the processors before the selector"
    )


def check_selectable_rows(kernel: str, logits: torch.Tensor) -> None:
    """Raise :func:`unselectable_row_error` for the first row of ``logits [rows, vocab]`` a selector cannot
    choose in (a NaN or +inf, only -inf, or no column at all)."""
    if logits.shape[0] and logits.shape[1] == 0:
        raise unselectable_row_error(kernel, 0)
    bad = ~(logits < float("inf")).all(dim=1) | ~(logits > float("-inf")).any(dim=1)
    if bool(bad.any()):
        raise unselectable_row_error(kernel, int(bad.nonzero()[0, 0]))


def check_threads(threads: int | None) -> int:
    """``threads`` for a C call (``None``: ``torch.get_num_threads()``); KernelArgumentError below 1."""
    threads = torch.get_num_threads() if threads is None else threads
    if threads < 1:
        raise KernelArgumentError(f"threads must be at least 1, got {threads}")
    return threads
