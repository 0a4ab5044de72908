"""Repetition, frequency and presence penalties from per-request token counts, in place.

The counts live in caller-owned tensors (one slot per request, see :class:`PenaltyCounts`): built
once when a request arrives and updated by one :func:`update_penalty_counts` call per step (the new
token of each row, and the token that left a penalty window), never recounted from the history.
:func:`apply_penalties` then visits only the tokens a request has seen, through a list of the
tokens present. The pure-torch fallback works on the dense counts and gives bit-identical logits
(and the same lists).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch.autograd.graph import increment_version

from pyagent_kernels import _extension
from pyagent_kernels._checks import check_tensor
from pyagent_kernels._extension import Backend
from pyagent_kernels._fast_checks import check_plain
from pyagent_kernels._penalties_torch import apply_penalties_torch, bad_penalty_row, update_counts_torch
from pyagent_kernels.errors import KernelArgumentError

__all__ = ["PenaltyCounts", "PenaltyParams", "apply_penalties", "update_penalty_counts"]


class PenaltyCounts:
    """Token counts of ``num_slots`` requests over a ``vocab``-sized vocabulary.

    Attributes:
        seen: int32 ``[num_slots, vocab]``, occurrences in the penalised context (prompt + output,
            or their last N tokens).
        out: int32 ``[num_slots, vocab]``, occurrences among that context's output tokens.
        bits: int64 ``[num_slots, ceil(vocab / 64)]``, bit ``j % 64`` of word ``j // 64`` set iff
            ``seen[:, j] > 0`` (the C kernel reads them as uint64).
        present: int32 ``[num_slots, vocab]``, the tokens with ``seen > 0`` in
            ``present[slot, :num_present[slot]]``, in the order they appeared (a token that leaves
            is replaced by the last one).
        num_present: int32 ``[num_slots]``.
    """

    def __init__(self, num_slots: int, vocab: int) -> None:
        if num_slots < 0 or vocab < 1:
            raise KernelArgumentError(
                f"PenaltyCounts: num_slots={num_slots} must be >= 0 and vocab={vocab} >= 1"
            )
        self.vocab = vocab
        self.seen = torch.zeros((num_slots, vocab), dtype=torch.int32)
        self.out = torch.zeros((num_slots, vocab), dtype=torch.int32)
        self.bits = torch.zeros((num_slots, (vocab + 63) // 64), dtype=torch.int64)
        self.present = torch.zeros((num_slots, vocab), dtype=torch.int32)
        self.num_present = torch.zeros(num_slots, dtype=torch.int32)
        self._pointers: tuple[Any, ...] | None = None
        self._num_slots = num_slots

    @property
    def num_slots(self) -> int:
        """How many requests the counts can hold."""
        return self._num_slots

    def grow(self, num_slots: int) -> None:
        """Make room for at least ``num_slots`` slots (the existing counts are kept)."""
        if num_slots <= self.num_slots:
            return
        extra = num_slots - self.num_slots
        self.seen = torch.cat([self.seen, self.seen.new_zeros((extra, self.vocab))])
        self.out = torch.cat([self.out, self.out.new_zeros((extra, self.vocab))])
        self.bits = torch.cat([self.bits, self.bits.new_zeros((extra, self.bits.shape[1]))])
        self.present = torch.cat([self.present, self.present.new_zeros((extra, self.vocab))])
        self.num_present = torch.cat([self.num_present, self.num_present.new_zeros(extra)])
        self._pointers = None
        self._num_slots = num_slots

    def clear(self, slot: int) -> None:
        """Forget every count of ``slot`` (for the next request that takes it)."""
        self.seen[slot].zero_()
        self.out[slot].zero_()
        self.bits[slot].zero_()
        self.num_present[slot] = 0

    def c_pointers(self, ffi: Any) -> tuple[Any, ...]:
        """``(seen, out, bits, present, num_present)`` as C pointers, kept until :meth:`grow`
        replaces the tensors."""
        if self._pointers is None:
            self._pointers = (
                ffi.cast("int32_t *", self.seen.data_ptr()), ffi.cast("int32_t *", self.out.data_ptr()),
                ffi.cast("uint64_t *", self.bits.data_ptr()), ffi.cast("int32_t *", self.present.data_ptr()),
                ffi.cast("int32_t *", self.num_present.data_ptr()),
            )
        return self._pointers


def _int32_vector(value: torch.Tensor, name: str, n: int) -> None:
    check_tensor(value, name, dtypes=(torch.int32,), shape=(n,))


IntVector = torch.Tensor | Sequence[int]


def _c_int32_array(ffi: Any, values: list[int]) -> Any:
    """``values`` as a new C int32 array."""
    try:
        return ffi.new("int32_t[]", values)
    except (OverflowError, TypeError) as exc:
        raise KernelArgumentError(
            f"update_penalty_counts: slots, tokens, d_seen and d_out must hold int32 integers ({exc})"
        ) from None


def update_penalty_counts(
    counts: PenaltyCounts,
    slots: IntVector,
    tokens: IntVector,
    d_seen: IntVector,
    d_out: IntVector,
    *,
    backend: Backend = "auto",
) -> None:
    """Add ``d_seen[i]`` / ``d_out[i]`` to the counts of token ``tokens[i]`` in slot ``slots[i]``.

    All four are int32 ``[n]`` CPU tensors, or all four sequences of ``n`` Python ints (cheaper for
    the few entries of one step: the C kernel checks them). The bitmap follows ``seen``. The result
    does not depend on the order of the entries.

    Raises:
        KernelArgumentError: a slot or token out of range, or deltas that would leave a count
            negative (the counts are then left as they were).
    """
    entries = (("slots", slots), ("tokens", tokens), ("d_seen", d_seen), ("d_out", d_out))
    if isinstance(slots, torch.Tensor):
        n = int(slots.shape[0]) if slots.dim() == 1 else -1
        for name, value in entries:
            if not isinstance(value, torch.Tensor):
                raise KernelArgumentError(f"update_penalty_counts: {name} must be an int32 tensor like slots")
            _int32_vector(value, name, n)
    else:
        n = len(slots)
        for name, value in entries:
            if isinstance(value, torch.Tensor) or len(value) != n:
                raise KernelArgumentError(
                    f"update_penalty_counts: {name} must be a sequence of {n} ints like slots "
                    "(or pass all four as int32 tensors)"
                )
    if _extension.resolve(backend, "update_penalty_counts") == "torch":
        tensors = [value if isinstance(value, torch.Tensor) else torch.tensor(value, dtype=torch.int32)
                   for _, value in entries]
        update_counts_torch(counts, *tensors)
        return
    ffi, lib = _extension.require()
    err = ffi.new("int64_t *")
    if isinstance(slots, torch.Tensor):
        arrays = tuple(ffi.cast("int32_t *", value.data_ptr()) for _, value in entries)  # type: ignore[union-attr]
    else:  # one C array for the four sequences
        table = _c_int32_array(ffi, [*slots, *tokens, *d_seen, *d_out])
        arrays = (table, table + n, table + 2 * n, table + 3 * n)
    rc = lib.pak_penalty_counts_update(*counts.c_pointers(ffi), counts.num_slots, counts.vocab, *arrays, n, err)
    if rc == 0:
        return
    if rc in (lib.PAK_EINDEX, lib.PAK_EPARAM):
        from pyagent_kernels._penalties_torch import update_error

        raise update_error(counts, slots, tokens, int(err[0]), negative=rc == lib.PAK_EPARAM)
    _extension.check_status(rc, "update_penalty_counts")


class PenaltyParams:
    """Per-row count slots and penalties of a batch, checked once for many :meth:`apply` calls.

    ``slots`` (int32) and ``repetition`` / ``frequency`` / ``presence`` (float32, or None: 1, 0,
    0 for every row) are 1-D CPU tensors or sequences of numbers, one entry per row; semantics in
    :func:`apply_penalties`. Values are checked by :meth:`apply`; tensors are used as they are
    (change their values if you like, never their shape).

    Raises:
        KernelArgumentError: a tensor of the wrong dtype, shape, layout or device, or parameters
            with different numbers of rows.
    """

    def __init__(
        self,
        slots: torch.Tensor | Sequence[int],
        *,
        repetition: torch.Tensor | Sequence[float] | None = None,
        frequency: torch.Tensor | Sequence[float] | None = None,
        presence: torch.Tensor | Sequence[float] | None = None,
    ) -> None:
        self.slots = slots if isinstance(slots, torch.Tensor) else torch.tensor(slots, dtype=torch.int32)
        check_tensor(self.slots, "slots", dtypes=(torch.int32,), shape=(None,))
        self.rows = int(self.slots.shape[0])
        self.values: dict[str, torch.Tensor | None] = {}
        for name, value in (("repetition", repetition), ("frequency", frequency), ("presence", presence)):
            if value is not None and not isinstance(value, torch.Tensor):
                value = torch.tensor(value, dtype=torch.float32)
            if value is not None:
                check_tensor(value, name, dtypes=(torch.float32,), shape=(self.rows,))
            self.values[name] = value
        self._pointers: tuple[Any, ...] | None = None

    def apply(self, logits: torch.Tensor, counts: PenaltyCounts, *, backend: Backend = "auto") -> None:
        """Penalise float32 ``logits [rows, vocab]`` in place (see :func:`apply_penalties`)."""
        check_plain(logits, "logits", torch.float32, (self.rows, counts.vocab), writable=True)
        repetition, frequency, presence = self.values.values()
        if _extension.resolve(backend, "apply_penalties") == "torch":
            if bool(_out_of_range(counts, self.slots, repetition, frequency, presence)):
                raise _penalty_error(counts, self.slots, repetition, frequency, presence)
            apply_penalties_torch(logits, counts, self.slots, repetition, frequency, presence)
            increment_version(logits)
            return
        ffi, lib = _extension.require()
        if self._pointers is None:
            self._pointers = (ffi.cast("int32_t *", self.slots.data_ptr()), *(
                ffi.NULL if value is None else ffi.cast("float *", value.data_ptr()) for value in self.values.values()
            ))
        slots_ptr, *penalty_ptrs = self._pointers
        err = ffi.new("int64_t *")
        _, out, _, present, num_present = counts.c_pointers(ffi)
        rc = lib.pak_penalties_apply_f32(
            ffi.cast("float *", logits.data_ptr()), self.rows, counts.vocab, out, present, num_present,
            counts.num_slots, slots_ptr, *penalty_ptrs, err,
        )
        if rc != 0:
            if rc in (lib.PAK_EINDEX, lib.PAK_EPARAM):
                raise _penalty_error(counts, self.slots, repetition, frequency, presence)
            _extension.check_status(rc, "apply_penalties")
        increment_version(logits)


def apply_penalties(
    logits: torch.Tensor,
    counts: PenaltyCounts,
    slots: torch.Tensor,
    *,
    repetition: torch.Tensor | None = None,
    frequency: torch.Tensor | None = None,
    presence: torch.Tensor | None = None,
    backend: Backend = "auto",
) -> None:
    """Penalise float32 ``logits [rows, vocab]`` in place with the counts of slot ``slots[r]``.

    For every token ``j`` with ``seen > 0``: repetition ``rp`` (transformers semantics)
    ``x = x * rp if x < 0 else x / rp``; then, if ``out[j] > 0``, ``x = x - fp * out[j]`` and
    ``x = x - pp`` (OpenAI frequency and presence). Other tokens are untouched. Each parameter is
    a float32 ``[rows]`` tensor or None (1, 0, 0). :class:`PenaltyParams` keeps the per-row
    tensors checked for many calls.

    Raises:
        KernelArgumentError: bad shapes or dtypes, a slot out of range, ``rp`` not finite and > 0,
            ``fp`` or ``pp`` not finite (checked before anything is written).
    """
    check_tensor(logits, "logits", dtypes=(torch.float32,), shape=(None, counts.vocab), writable=True)
    rows = int(logits.shape[0])
    _int32_vector(slots, "slots", rows)
    for name, value in (("repetition", repetition), ("frequency", frequency), ("presence", presence)):
        if value is not None:
            check_tensor(value, name, dtypes=(torch.float32,), shape=(rows,))
    PenaltyParams(slots, repetition=repetition, frequency=frequency, presence=presence).apply(
        logits, counts, backend=backend
    )


def _out_of_range(
    counts: PenaltyCounts,
    slots: torch.Tensor,
    repetition: torch.Tensor | None,
    frequency: torch.Tensor | None,
    presence: torch.Tensor | None,
) -> torch.Tensor:
    """Whether any row has a slot or penalty out of range (one vectorized test; the C kernel's rule)."""
    bad = (slots < 0) | (slots >= counts.num_slots)
    if repetition is not None:
        bad |= ~(torch.isfinite(repetition) & (repetition > 0))
    for values in (frequency, presence):
        if values is not None:
            bad |= ~torch.isfinite(values)
    return bad.any()


def _penalty_error(
    counts: PenaltyCounts,
    slots: torch.Tensor,
    repetition: torch.Tensor | None,
    frequency: torch.Tensor | None,
    presence: torch.Tensor | None,
) -> KernelArgumentError:
    """The error naming the first row whose slot or penalty is out of range."""
    error = bad_penalty_row(counts, slots, repetition, frequency, presence)
    return error or KernelArgumentError("apply_penalties: a slot or penalty is out of range")
