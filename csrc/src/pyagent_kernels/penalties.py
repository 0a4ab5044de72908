"""Repetition, frequency and presence penalties from per-request token counts, in place.

The counts live in caller-owned tensors (one slot per request, see :class:`PenaltyCounts`): built
once when a request arrives and updated by one :func:`update_penalty_counts` call per step (the new
token of each row, and the token that left a penalty window), never recounted from the history.
:func:`apply_penalties` then visits only the tokens a request has seen, through an occupancy
bitmap. The pure-torch fallback works on the dense counts and gives bit-identical logits.
"""

from __future__ import annotations

import torch

from pyagent_kernels import _extension
from pyagent_kernels._checks import check_tensor
from pyagent_kernels._extension import Backend
from pyagent_kernels._penalties_torch import apply_penalties_torch, bad_penalty_row, update_counts_torch
from pyagent_kernels.errors import KernelArgumentError

__all__ = ["PenaltyCounts", "apply_penalties", "update_penalty_counts"]


class PenaltyCounts:
    """Token counts of ``num_slots`` requests over a ``vocab``-sized vocabulary.

    Attributes:
        seen: int32 ``[num_slots, vocab]``, occurrences in the penalised context (prompt + output,
            or their last N tokens).
        out: int32 ``[num_slots, vocab]``, occurrences among that context's output tokens.
        bits: int64 ``[num_slots, ceil(vocab / 64)]``, bit ``j % 64`` of word ``j // 64`` set iff
            ``seen[:, j] > 0`` (the C kernel reads them as uint64).
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

    @property
    def num_slots(self) -> int:
        """How many requests the counts can hold."""
        return int(self.seen.shape[0])

    def grow(self, num_slots: int) -> None:
        """Make room for at least ``num_slots`` slots (the existing counts are kept)."""
        if num_slots <= self.num_slots:
            return
        extra = num_slots - self.num_slots
        self.seen = torch.cat([self.seen, self.seen.new_zeros((extra, self.vocab))])
        self.out = torch.cat([self.out, self.out.new_zeros((extra, self.vocab))])
        self.bits = torch.cat([self.bits, self.bits.new_zeros((extra, self.bits.shape[1]))])

    def clear(self, slot: int) -> None:
        """Forget every count of ``slot`` (for the next request that takes it)."""
        self.seen[slot].zero_()
        self.out[slot].zero_()
        self.bits[slot].zero_()


def _int32_vector(value: torch.Tensor, name: str, n: int) -> None:
    check_tensor(value, name, dtypes=(torch.int32,), shape=(n,))


def update_penalty_counts(
    counts: PenaltyCounts,
    slots: torch.Tensor,
    tokens: torch.Tensor,
    d_seen: torch.Tensor,
    d_out: torch.Tensor,
    *,
    backend: Backend = "auto",
) -> None:
    """Add ``d_seen[i]`` / ``d_out[i]`` to the counts of token ``tokens[i]`` in slot ``slots[i]``.

    All four are int32 ``[n]`` CPU tensors. The bitmap follows ``seen``. The result does not
    depend on the order of the entries.

    Raises:
        KernelArgumentError: a slot or token out of range, or deltas that would leave a count
            negative (the counts are then left as they were).
    """
    n = int(slots.shape[0]) if isinstance(slots, torch.Tensor) and slots.dim() == 1 else -1
    for name, value in (("slots", slots), ("tokens", tokens), ("d_seen", d_seen), ("d_out", d_out)):
        _int32_vector(value, name, n)
    if _extension.resolve(backend, "update_penalty_counts") == "torch":
        update_counts_torch(counts, slots, tokens, d_seen, d_out)
        return
    ffi, lib = _extension.require()
    err = ffi.new("int64_t *")
    rc = lib.pak_penalty_counts_update(
        ffi.cast("int32_t *", counts.seen.data_ptr()), ffi.cast("int32_t *", counts.out.data_ptr()),
        ffi.cast("uint64_t *", counts.bits.data_ptr()), counts.num_slots, counts.vocab,
        ffi.cast("int32_t *", slots.data_ptr()), ffi.cast("int32_t *", tokens.data_ptr()),
        ffi.cast("int32_t *", d_seen.data_ptr()), ffi.cast("int32_t *", d_out.data_ptr()), n, err,
    )
    if rc in (lib.PAK_EINDEX, lib.PAK_EPARAM):
        from pyagent_kernels._penalties_torch import update_error

        raise update_error(counts, slots, tokens, int(err[0]), negative=rc == lib.PAK_EPARAM)
    _extension.check_status(rc, "update_penalty_counts")


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
    a float32 ``[rows]`` tensor or None (1, 0, 0).

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
    if _extension.resolve(backend, "apply_penalties") == "torch":
        if bool(_out_of_range(counts, slots, repetition, frequency, presence)):
            raise _penalty_error(counts, slots, repetition, frequency, presence)
        apply_penalties_torch(logits, counts, slots, repetition, frequency, presence)
        return
    ffi, lib = _extension.require()

    def floats(value: torch.Tensor | None) -> object:
        return ffi.NULL if value is None else ffi.cast("float *", value.data_ptr())

    err = ffi.new("int64_t *")
    rc = lib.pak_penalties_apply_f32(
        ffi.cast("float *", logits.data_ptr()), rows, counts.vocab,
        ffi.cast("int32_t *", counts.seen.data_ptr()), ffi.cast("int32_t *", counts.out.data_ptr()),
        ffi.cast("uint64_t *", counts.bits.data_ptr()), counts.num_slots,
        ffi.cast("int32_t *", slots.data_ptr()), floats(repetition), floats(frequency), floats(presence), err,
    )
    if rc in (lib.PAK_EINDEX, lib.PAK_EPARAM):
        raise _penalty_error(counts, slots, repetition, frequency, presence)
    _extension.check_status(rc, "apply_penalties")


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
