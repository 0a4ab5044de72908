"""Fused per-row temperature / top-k / top-p / min-p mask over float32 logits, in place.

The C kernel never sorts the whole vocabulary. A row with top-k is read once: a running bound
sends the few values that can still be among the k largest to a small buffer while the row is
overwritten with -inf, and top-p, min-p and the temperature then work on that buffer alone. Rows
without top-k bound the kept set by the probability mass above a few levels below the maximum. The
pure-torch fallback sorts each row and gives bit-identical results.

:func:`apply_sampling_mask` takes the per-row parameters as tensors; :class:`SamplingParams` holds
them validated for many calls (a batch whose requests do not change), and :class:`KeptTokens`
records the tokens each row kept, so that a selector such as ``pyagent_kernels.gumbel`` looks at
those alone instead of scanning the row again.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch.autograd.graph import increment_version

from pyagent_kernels import _extension
from pyagent_kernels._checks import check_tensor, nonfinite_logits_error, param_error
from pyagent_kernels._extension import Backend
from pyagent_kernels._fast_checks import check_plain
from pyagent_kernels._sampling_torch import sampling_mask_torch
from pyagent_kernels.errors import KernelArgumentError

__all__ = ["KeptTokens", "SamplingParams", "apply_sampling_mask"]

_STEPS: tuple[tuple[str, torch.dtype, str], ...] = (
    ("temperature", torch.float32, "float *"),
    ("top_k", torch.int32, "int32_t *"),
    ("top_p", torch.float32, "float *"),
    ("min_p", torch.float32, "float *"),
)
_INT32_MAX = 2**31 - 1


class KeptTokens:
    """The tokens each row of a batch kept after :func:`apply_sampling_mask`, for a selector.

    After a mask call with ``kept=``, ``count[r] = c >= 0`` says that the logits of row ``r`` that
    are not -inf are exactly those of the tokens ``index[r, :c]`` (in increasing order), with the
    values ``values[r, :c]`` (so a selector need not read the row); ``-1`` says the row's tokens
    were not recorded (more than ``capacity``, or a row the mask left as it
    was), and a selector then scans the whole row. The record belongs to one logits tensor in one
    state: :meth:`matches` tells whether a tensor is still it (same storage, shape and version, so
    any later in-place torch op on it voids the record). The buffers are reused from call to call
    and grow with the batch.

    Args:
        capacity: most tokens recorded per row (rows that keep more record -1).
    """

    def __init__(self, capacity: int = 1024) -> None:
        if not isinstance(capacity, int) or not 0 <= capacity <= _INT32_MAX:
            raise KernelArgumentError(f"KeptTokens: capacity={capacity!r} must be an int in [0, 2**31 - 1]")
        self.capacity = capacity
        self.index = torch.empty((0, capacity), dtype=torch.int32)
        self.values = torch.empty((0, capacity), dtype=torch.float32)
        self.count = torch.empty(0, dtype=torch.int32)
        self._owner: tuple[int, torch.Size, int] | None = None
        self._pointers: tuple[Any, Any, Any] | None = None

    def reserve(self, rows: int) -> None:
        """Make room for ``rows`` rows and forget the current record."""
        self._owner = None
        if rows > self.count.shape[0]:
            self.index = torch.empty((rows, self.capacity), dtype=torch.int32)
            self.values = torch.empty((rows, self.capacity), dtype=torch.float32)
            self.count = torch.empty(rows, dtype=torch.int32)
            self._pointers = None

    def pointers(self, ffi: Any) -> tuple[Any, Any, Any]:
        """``(index, values, count)`` as C pointers (kept while the buffers are)."""
        if self._pointers is None:
            self._pointers = (
                ffi.cast("int32_t *", self.index.data_ptr()), ffi.cast("float *", self.values.data_ptr()),
                ffi.cast("int32_t *", self.count.data_ptr()),
            )
        return self._pointers

    def record(self, logits: torch.Tensor) -> None:
        """Mark the counts as describing ``logits`` as it is now."""
        self._owner = (logits.data_ptr(), logits.shape, logits._version)

    def clear(self) -> None:
        """Forget the record: no tensor :meth:`matches` until the next mask call."""
        self._owner = None

    def matches(self, logits: torch.Tensor) -> bool:
        """Whether the record describes ``logits`` (the same tensor, not modified in place since)."""
        return self._owner is not None and self._owner == (logits.data_ptr(), logits.shape, logits._version)

    def tokens(self, row: int) -> list[int] | None:
        """Row ``row``'s kept tokens, or None where they were not recorded."""
        count = int(self.count[row])
        return None if count < 0 else self.index[row, :count].tolist()


class SamplingParams:
    """Per-row temperature / top-k / top-p / min-p of a batch, checked once for many mask calls.

    Each parameter is None (the step is off for every row), a sequence of numbers, or a 1-D CPU
    tensor of the kernel's dtype (float32; int32 for ``top_k``, where larger values are clamped to
    2**31 - 1 when given as numbers), one entry per row; semantics in :func:`apply_sampling_mask`.
    Out-of-range values are reported by :meth:`apply`, before anything is written. Tensors are
    used as they are, not copied: change their values if you like, never their shape.

    Args:
        temperature_last: divide by the temperature after the masks instead of before.
        rows: the number of rows every parameter must have (None: whatever the first one has).

    Raises:
        KernelArgumentError: a tensor of the wrong dtype, shape, layout or device, or parameters
            with different numbers of rows.
    """

    def __init__(
        self,
        *,
        temperature: torch.Tensor | Sequence[float] | None = None,
        top_k: torch.Tensor | Sequence[int] | None = None,
        top_p: torch.Tensor | Sequence[float] | None = None,
        min_p: torch.Tensor | Sequence[float] | None = None,
        temperature_last: bool = False,
        rows: int | None = None,
    ) -> None:
        given = {"temperature": temperature, "top_k": top_k, "top_p": top_p, "min_p": min_p}
        self.rows: int | None = rows
        self.tensors: dict[str, torch.Tensor | None] = {}
        for name, dtype, _ in _STEPS:
            value = given[name]
            if value is not None and not isinstance(value, torch.Tensor):
                if name == "top_k":
                    value = [min(int(v), _INT32_MAX) for v in value]
                value = torch.tensor(value, dtype=dtype)
            if value is not None:
                check_tensor(value, name, dtypes=(dtype,), shape=(self.rows,))
                self.rows = int(value.shape[0])
            self.tensors[name] = value
        self.temperature_last = bool(temperature_last)
        self._pointers: tuple[Any, ...] | None = None

    def _c_pointers(self, ffi: Any) -> tuple[Any, ...]:
        if self._pointers is None:
            self._pointers = _param_pointers(ffi, self.tensors)
        return self._pointers

    def apply(
        self, logits: torch.Tensor, *, kept: KeptTokens | None = None, backend: Backend = "auto", threads: int = 1
    ) -> None:
        """Mask ``logits`` (float32 ``[rows, vocab]``, contiguous, CPU) in place with these parameters.

        ``kept``: when given, records the tokens each row kept (see :class:`KeptTokens`).
        ``backend`` and ``threads`` as in :func:`apply_sampling_mask`, and so are the errors.
        """
        check_plain(logits, "logits", torch.float32, (self.rows, None), writable=True)
        _run_mask(logits, self.tensors, self._c_pointers, self.temperature_last, kept, backend, threads)


def _param_pointers(ffi: Any, tensors: dict[str, torch.Tensor | None]) -> tuple[Any, ...]:
    """The four parameter tensors as C pointers, in the kernel's order (NULL for None)."""
    return tuple(
        ffi.NULL if tensors[name] is None else ffi.cast(kind, tensors[name].data_ptr())  # type: ignore[union-attr]
        for name, _, kind in _STEPS
    )


def _run_mask(
    logits: torch.Tensor,
    tensors: dict[str, torch.Tensor | None],
    pointers: Callable[[Any], tuple[Any, ...]],
    temperature_last: bool,
    kept: KeptTokens | None,
    backend: Backend,
    threads: int,
) -> None:
    """The mask over checked arguments: ``pointers(ffi)`` gives the parameters' C pointers."""
    if not isinstance(threads, int) or threads < 1:
        raise KernelArgumentError(f"threads={threads!r} must be a positive int (1: the calling thread only)")
    rows, vocab = logits.shape
    if kept is not None:
        kept.reserve(rows)
    if _extension.resolve(backend, "apply_sampling_mask") == "torch":
        sampling_mask_torch(logits, tensors["temperature"], tensors["top_k"], tensors["top_p"], tensors["min_p"],
                            temperature_last, None if kept is None else (kept.index, kept.values, kept.count))
    else:
        ffi, lib = _extension.require()
        kept_index, kept_values, kept_count = (ffi.NULL,) * 3 if kept is None else kept.pointers(ffi)
        err_row = ffi.new("int64_t *")
        rc = lib.pak_sampling_mask_ex_f32(
            ffi.cast("float *", logits.data_ptr()), rows, vocab, *pointers(ffi),
            lib.PAK_MASK_TEMPERATURE_LAST if temperature_last else 0, threads,
            kept_index, kept_values, kept_count, 0 if kept is None else kept.capacity, err_row,
        )
        if rc != 0:
            if rc == lib.PAK_EPARAM:
                raise param_error(err_row[0], tensors["temperature"], tensors["top_p"], tensors["min_p"])
            if rc == lib.PAK_EVALUE:
                raise nonfinite_logits_error(err_row[0])
            _extension.check_status(rc, "apply_sampling_mask")
    increment_version(logits)
    if kept is not None:
        kept.record(logits)


def apply_sampling_mask(
    logits: torch.Tensor,
    *,
    temperature: torch.Tensor | None = None,
    top_k: torch.Tensor | None = None,
    top_p: torch.Tensor | None = None,
    min_p: torch.Tensor | None = None,
    temperature_last: bool = False,
    kept: KeptTokens | None = None,
    backend: Backend = "auto",
    threads: int = 1,
) -> None:
    """Scale logits by temperature and mask (-inf) every token outside the top-k / top-p / min-p set.

    Every parameter is a 1-D CPU tensor with one entry per row, or None to disable that step for
    all rows. Per row, in this order, each step on what the previous ones kept:

    1. ``temperature`` (float32): when ``t > 0`` and ``t != 1`` logits become ``logits / t``;
       ``t <= 0`` (greedy) or ``t == 1`` leaves them unscaled. Must be finite.
    2. ``top_k`` (int32): keep tokens whose logit is >= the k-th largest (all tokens tied with it
       are kept); ``k <= 0`` or ``k >= vocab`` disables it.
    3. ``top_p`` (float32, in [0, 1]): over the softmax of the kept logits, keep tokens in
       descending order down to the first one at which the cumulative probability reaches ``p``,
       plus all tokens tied with it (at least the top token: ``p = 0`` keeps only the top token(s));
       ``p = 1`` disables it.
    4. ``min_p`` (float32, in [0, 1]): keep tokens with ``prob >= min_p * max_prob``, evaluated as
       ``logit - max_logit >= log(min_p)`` in double precision; ``0`` disables it, ``1`` keeps the
       tokens tied with the maximum.

    With ``temperature_last=True`` step 1 moves to the end: top-p and min-p see the unscaled
    logits and the kept ones are divided by ``t`` last (a chain "top_k, top_p, min_p, temperature").

    These match the transformers TopK / TopP / MinP warpers in that order, except that ties at a
    cut-off are always kept whole. Top-p probabilities are ``exp(logit - max)`` computed in float32
    (about 1e-7 relative error, like a float32 softmax) and summed in float64 in a fixed order, so
    the C kernel on every instruction set and the torch fallback agree bit for bit. Rows whose
    logits are all -inf are left unchanged.

    Args:
        logits: float32 ``[num_rows, vocab]``, contiguous, on CPU; -inf marks banned tokens.
        temperature, top_k, top_p, min_p: ``[num_rows]`` tensors as above, or None.
        kept: when given, records which tokens each row kept (see :class:`KeptTokens`).
        backend: "auto" (C if built, else torch with a one-time warning), "c" or "torch".
        threads: most threads the C kernel splits the rows among (fewer when there is little
            work: about 2^17 logits per thread at least). The default, 1, runs on the calling
            thread. More pay off for large batches while torch's own workers are idle (e.g. with
            ``OMP_WAIT_POLICY=PASSIVE``); right after a torch op its spinning workers compete for
            the same cores. The torch fallback ignores it.

    Raises:
        KernelArgumentError: wrong type, dtype, shape, layout or device; a parameter or
            ``threads`` out of range (checked before anything is written); a NaN or +inf logit
            (rows before it may have been modified, and that row's contents are unspecified).
        KernelUnavailableError: backend="c" but the extension is not built.
    """
    check_tensor(logits, "logits", dtypes=(torch.float32,), shape=(None, None), writable=True)
    rows = int(logits.shape[0])
    tensors = {"temperature": temperature, "top_k": top_k, "top_p": top_p, "min_p": min_p}
    for name, dtype, _ in _STEPS:
        if tensors[name] is not None:
            check_tensor(tensors[name], name, dtypes=(dtype,), shape=(rows,))
    _run_mask(logits, tensors, lambda ffi: _param_pointers(ffi, tensors), temperature_last, kept, backend, threads)
