"""Batched LoRA across adapters: one call adds every row's adapter delta to a linear layer's output.

A :class:`LoRAStack` holds one linear layer's adapters in fixed slots (``max_loras`` of them, each
up to ``max_rank``), in the layout of ``include/pyagent/lora.h``: per slot and slice the shrink
matrix ``A [rank, in]`` and the expand matrix ``B [out_k, rank]`` (stored transposed), the scale
(``alpha / rank``, ``alpha / sqrt(rank)`` for rsLoRA) and the rank. A slice is one target of a fused
projection (the q, k and v rows of a fused q/k/v matrix, gate and up) or the whole output. Loading
an adapter into a slot is copying its matrices there; the products read only its rank's rows.

:func:`lora_apply` adds ``scale * (x A^T) B^T`` to each row of ``y`` whose slot (``slots[row]``) is
not -1, the rows of one slot grouped so its matrices are read once per call (Punica's SGMV, over
per-row slot indices like BGMV): one step's rows may use different adapters, or none, in any order.
A row's bits depend only on its own input and adapter (the order of operations is the header's).
:func:`prepare_lora` checks such a call on buffers a caller reuses every step once (the slot
indices are read at each run). The pure-torch fallback (:mod:`pyagent_kernels._lora_torch`) gives
the same values within float rounding.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import torch

from pyagent_kernels import _extension
from pyagent_kernels._checks import check_separate, check_tensor, check_threads
from pyagent_kernels._extension import Backend, PreparedCall
from pyagent_kernels._lora_torch import lora_apply_torch
from pyagent_kernels.errors import KernelArgumentError, KernelError

__all__ = ["LoRAStack", "lora_apply", "prepare_lora"]

_DTYPES = {torch.float32: 0, torch.bfloat16: 1}


class LoRAStack:
    """One linear layer's LoRA adapters in ``max_loras`` fixed slots of up to ``max_rank`` each.

    Args:
        max_loras: the number of slots.
        max_rank: the largest rank a slot holds.
        in_features: the layer's input width.
        slice_sizes: the widths of the output's slices, in order (one entry: the whole output).
        dtype: of the matrices: the activations' (float32 or bfloat16).

    Attributes:
        a: ``[max_loras, slices, max_rank, in_features]`` shrink matrices.
        b: ``[max_loras, max_rank, out_features]`` expand matrices, transposed, slice ``k`` in its columns.
        scales: float32 ``[max_loras, slices]``; 0 where a slot's adapter leaves a slice alone.
        ranks: int32 ``[max_loras, slices]``; 0 where a slot's adapter leaves a slice alone.
        starts: int64 ``[slices + 1]``, the first output of each slice, then ``out_features``.
    """

    def __init__(self, max_loras: int, max_rank: int, in_features: int, slice_sizes: Sequence[int],
                 dtype: torch.dtype = torch.float32) -> None:
        if dtype not in _DTYPES:
            raise KernelArgumentError(f"LoRAStack: dtype {dtype} is not supported; use torch.float32 or torch.bfloat16")
        sizes = list(slice_sizes)
        if min(max_loras, max_rank, in_features, len(sizes), *sizes) < 1:
            raise KernelArgumentError(
                f"LoRAStack: max_loras ({max_loras}), max_rank ({max_rank}), in_features ({in_features}) and every "
                f"slice size ({sizes}) must be positive"
            )
        self.max_loras, self.max_rank, self.in_features = max_loras, max_rank, in_features
        self.slices = len(sizes)
        self.out_features = sum(sizes)
        self.dtype = dtype
        self.starts = torch.tensor([0, *torch.tensor(sizes).cumsum(0).tolist()], dtype=torch.int64)
        self.a = torch.zeros((max_loras, self.slices, max_rank, in_features), dtype=dtype)
        self.b = torch.zeros((max_loras, max_rank, self.out_features), dtype=dtype)
        self.scales = torch.zeros((max_loras, self.slices), dtype=torch.float32)
        self.ranks = torch.zeros((max_loras, self.slices), dtype=torch.int32)

    def __repr__(self) -> str:
        return (f"LoRAStack(max_loras={self.max_loras}, max_rank={self.max_rank}, in_features={self.in_features}, "
                f"slices={self.starts.diff().tolist()}, dtype={self.dtype})")

    def _check_slot(self, slot: int) -> None:
        if not 0 <= slot < self.max_loras:
            raise KernelArgumentError(f"LoRAStack: slot {slot} is outside [0, {self.max_loras})")

    def load(self, slot: int, index: int, a: torch.Tensor, b: torch.Tensor, scale: float) -> None:
        """Put an adapter's matrices for slice ``index`` into ``slot``: ``a [rank, in_features]``,
        ``b [slice width, rank]`` (any float dtype, converted), ``rank <= max_rank``, ``scale`` finite."""
        self._check_slot(slot)
        if not 0 <= index < self.slices:
            raise KernelArgumentError(f"LoRAStack: slice {index} is outside [0, {self.slices})")
        begin, end = int(self.starts[index]), int(self.starts[index + 1])
        rank = a.shape[0] if a.dim() == 2 else -1
        if a.dim() != 2 or b.dim() != 2 or a.shape[1] != self.in_features or b.shape != (end - begin, rank):
            raise KernelArgumentError(
                f"LoRAStack: slice {index} takes a [rank, {self.in_features}] and b [{end - begin}, rank]; got "
                f"a {list(a.shape)} and b {list(b.shape)}"
            )
        if not 1 <= rank <= self.max_rank:
            raise KernelArgumentError(f"LoRAStack: rank {rank} is outside [1, max_rank = {self.max_rank}]")
        if not math.isfinite(scale):
            raise KernelArgumentError(f"LoRAStack: scale must be finite, got {scale}")
        self.a[slot, index, :rank] = a
        self.b[slot, :rank, begin:end] = b.T
        self.ranks[slot, index] = rank
        self.scales[slot, index] = scale

    def clear(self, slot: int) -> None:
        """Empty ``slot``: its rows then get no delta (its matrices are left as they are, never read)."""
        self._check_slot(slot)
        self.ranks[slot] = 0
        self.scales[slot] = 0.0


def _check(x: torch.Tensor, y: torch.Tensor, slots: torch.Tensor, stack: LoRAStack) -> None:
    rows = x.shape[0] if isinstance(x, torch.Tensor) and x.dim() == 2 else None
    check_tensor(x, "x", dtypes=(stack.dtype,), shape=(rows, stack.in_features))
    check_tensor(y, "y", dtypes=(stack.dtype,), shape=(rows, stack.out_features), writable=True)
    check_tensor(slots, "slots", dtypes=(torch.int32,), shape=(rows,))
    check_separate("lora_apply", {"y": y}, {"x": x, "a": stack.a, "b": stack.b})


def _slot_error(slots: torch.Tensor, stack: LoRAStack) -> KernelArgumentError | None:
    bad = ((slots < -1) | (slots >= stack.max_loras)).nonzero()
    if not len(bad):
        return None
    row = int(bad[0, 0])
    return KernelArgumentError(f"lora_apply: slots[{row}] = {int(slots[row])} is outside [-1, {stack.max_loras}); "
                               "-1 is the base model, 0 .. max_loras - 1 a slot")


def _c_call(ext: _extension.Extension, x: torch.Tensor, y: torch.Tensor, slots: torch.Tensor, stack: LoRAStack,
            u: torch.Tensor, order: torch.Tensor, threads: int) -> Callable[[], int]:
    """The C call ``y += delta`` on these tensors, raising KernelArgumentError for a bad slot index."""
    ffi, lib = ext.ffi, ext.lib
    rows = x.shape[0]

    def pointer(kind: str, tensor: torch.Tensor) -> object:
        return ffi.cast(kind, tensor.data_ptr())

    arguments = (
        pointer("void *", x), pointer("void *", y), _DTYPES[stack.dtype], pointer("int32_t *", slots), rows,
        stack.in_features, stack.out_features, pointer("void *", stack.a), pointer("void *", stack.b),
        pointer("float *", stack.scales), pointer("int32_t *", stack.ranks), pointer("int64_t *", stack.starts),
        stack.slices, stack.max_loras, stack.max_rank, pointer("float *", u), pointer("int32_t *", order), threads,
    )
    function = lib.pak_lora_apply

    def call() -> int:
        rc: int = function(*arguments)
        if rc == lib.PAK_EINDEX:
            raise _slot_error(slots, stack) or KernelError("lora_apply: the kernel refused a slot index")
        return rc

    return call


def _scratch(rows: int, stack: LoRAStack) -> tuple[torch.Tensor, torch.Tensor]:
    return (torch.empty((rows, stack.slices, stack.max_rank), dtype=torch.float32),
            torch.empty((rows,), dtype=torch.int32))


def lora_apply(x: torch.Tensor, y: torch.Tensor, slots: torch.Tensor, stack: LoRAStack, *,
               threads: int | None = None, backend: Backend = "auto") -> None:
    """Add each row's LoRA delta to ``y`` in place: ``y[t, slice k] += scale * (x[t] A_k^T) B_k^T`` with
    the matrices of slot ``slots[t]`` (rows of slot -1 untouched).

    Args:
        x: ``[rows, in_features]``, the layer's input, of the stack's dtype, contiguous, on CPU.
        y: ``[rows, out_features]``, the layer's output (the base product), of the same dtype.
        slots: int32 ``[rows]``, -1 or a slot of ``stack``.
        stack: the adapters.
        threads: threads the C kernel may use (default: ``torch.get_num_threads()``).
        backend: "auto" (C if built, else torch with a one-time warning), "c" or "torch".

    Raises:
        KernelArgumentError: a tensor has the wrong type, dtype, shape or layout, ``y`` shares memory
            with an input, or a slot index is out of range (nothing is written then).
    """
    _check(x, y, slots, stack)
    error = _slot_error(slots, stack)
    if error is not None:
        raise error
    threads = check_threads(threads)
    ext = _extension.c_extension(backend, "lora_apply")
    if ext is None:
        lora_apply_torch(x, y, slots, stack.a, stack.b, stack.scales, stack.ranks, stack.starts)
        return
    u, order = _scratch(x.shape[0], stack)
    _extension.run_call(_c_call(ext, x, y, slots, stack, u, order, threads), (), "lora_apply")


def prepare_lora(x: torch.Tensor, y: torch.Tensor, slots: torch.Tensor, stack: LoRAStack, *,
                 threads: int | None = None, backend: Backend = "auto") -> PreparedCall:
    """``lora_apply(x, y, slots, stack)`` as a call checked once, for buffers a caller reuses every step
    (run it with :func:`pyagent_kernels.run_prepared`); each run reads the current ``slots`` and the
    stack's current slots, and raises :class:`KernelArgumentError` for a slot index out of range."""
    _check(x, y, slots, stack)
    threads = check_threads(threads)
    tensors = (x, y, slots, stack.a, stack.b, stack.scales, stack.ranks, stack.starts)
    ext = _extension.c_extension(backend, "lora_apply")
    if ext is None:
        def fallback() -> int:
            error = _slot_error(slots, stack)
            if error is not None:
                raise error
            lora_apply_torch(x, y, slots, stack.a, stack.b, stack.scales, stack.ranks, stack.starts)
            return 0

        return PreparedCall(fallback, (), "lora_apply", tensors)
    u, order = _scratch(x.shape[0], stack)
    return PreparedCall(_c_call(ext, x, y, slots, stack, u, order, threads), (), "lora_apply", (*tensors, u, order))
