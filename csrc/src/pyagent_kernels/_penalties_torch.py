"""Pure-torch fallback of the penalty kernels (kernels/penalties/penalties.c), bit-identical to C."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import torch

from pyagent_kernels.errors import KernelArgumentError

if TYPE_CHECKING:
    from pyagent_kernels.penalties import PenaltyCounts

_BIT_VALUES = torch.tensor([1 << b if b < 63 else -(1 << 63) for b in range(64)], dtype=torch.int64)


def update_error(
    counts: PenaltyCounts, slots: torch.Tensor | Sequence[int], tokens: torch.Tensor | Sequence[int], index: int,
    *, negative: bool
) -> KernelArgumentError:
    """The error for entry ``index`` of a count update (out of range, or leaving a count negative)."""
    slot, token = int(slots[index]), int(tokens[index])
    if negative:
        return KernelArgumentError(
            f"update_penalty_counts: entry {index} (slot {slot}, token {token}) would leave a count "
            "negative; remove only tokens that were added (the counts were left unchanged)"
        )
    return KernelArgumentError(
        f"update_penalty_counts: entry {index} has slot {slot} and token {token}; slots must lie in "
        f"[0, {counts.num_slots}) and tokens in [0, {counts.vocab})"
    )


def update_counts_torch(
    counts: PenaltyCounts, slots: torch.Tensor, tokens: torch.Tensor, d_seen: torch.Tensor, d_out: torch.Tensor
) -> None:
    """Add the deltas to the counts and refresh the bitmap words they touch (see the C kernel)."""
    bad = ((slots < 0) | (slots >= counts.num_slots) | (tokens < 0) | (tokens >= counts.vocab)).nonzero()
    if len(bad):
        raise update_error(counts, slots, tokens, int(bad[0, 0]), negative=False)
    if slots.numel() == 0:
        return
    index = (slots.long(), tokens.long())
    seen = counts.seen.index_put(index, d_seen, accumulate=True)
    out = counts.out.index_put(index, d_out, accumulate=True)
    negative = ((seen[index] < 0) | (out[index] < 0)).nonzero()
    if len(negative):
        raise update_error(counts, slots, tokens, int(negative[0, 0]), negative=True)
    counts.seen.copy_(seen)
    counts.out.copy_(out)
    words = torch.unique(slots.long() * counts.bits.shape[1] + tokens.long() // 64)
    slot_of, word_of = words // counts.bits.shape[1], words % counts.bits.shape[1]
    columns = word_of.unsqueeze(1) * 64 + torch.arange(64)
    present = counts.seen[slot_of.unsqueeze(1), columns.clamp(max=counts.vocab - 1)] > 0
    present &= columns < counts.vocab
    before = counts.bits[slots.long(), tokens.long() // 64].tolist()
    counts.bits[slot_of, word_of] = (present.long() * _BIT_VALUES).sum(dim=1)
    _update_present(counts, slots.tolist(), tokens.tolist(), before)


def _update_present(counts: PenaltyCounts, slots: list[int], tokens: list[int], words_before: list[int]) -> None:
    """Keep the present lists in the C kernel's order: entry by entry, a token whose count became
    positive is appended, one whose count dropped to 0 is swapped with the last and dropped."""
    lists: dict[int, list[int]] = {}
    listed: set[tuple[int, int]] = set()
    for slot, token, word in zip(slots, tokens, words_before, strict=True):
        if slot not in lists:
            lists[slot] = counts.present[slot, : int(counts.num_present[slot])].tolist()
        if (word >> (token % 64)) & 1:
            listed.add((slot, token))
    for slot, token in zip(slots, tokens, strict=True):
        entries, now = lists[slot], int(counts.seen[slot, token]) > 0
        if now and (slot, token) not in listed:
            entries.append(token)
            listed.add((slot, token))
        elif not now and (slot, token) in listed:
            position = entries.index(token)
            entries[position] = entries[-1]
            entries.pop()
            listed.discard((slot, token))
    for slot, entries in lists.items():
        counts.present[slot, : len(entries)] = torch.tensor(entries, dtype=torch.int32)
        counts.num_present[slot] = len(entries)


def bad_penalty_row(
    counts: PenaltyCounts,
    slots: torch.Tensor,
    repetition: torch.Tensor | None,
    frequency: torch.Tensor | None,
    presence: torch.Tensor | None,
) -> KernelArgumentError | None:
    """The error for the first row with an out-of-range slot or penalty (the C kernel's rule)."""
    for row in range(int(slots.shape[0])):
        slot = int(slots[row])
        if not 0 <= slot < counts.num_slots:
            return KernelArgumentError(
                f"apply_penalties: slots[{row}] = {slot} is outside [0, {counts.num_slots})"
            )
        if repetition is not None and not (torch.isfinite(repetition[row]) and repetition[row] > 0):
            return KernelArgumentError(
                f"apply_penalties: repetition[{row}] = {float(repetition[row])} must be finite and > 0 "
                "(1 disables it)"
            )
        for name, value in (("frequency", frequency), ("presence", presence)):
            if value is not None and not torch.isfinite(value[row]):
                return KernelArgumentError(
                    f"apply_penalties: {name}[{row}] = {float(value[row])} must be finite (0 disables it)"
                )
    return None


def apply_penalties_torch(
    logits: torch.Tensor,
    counts: PenaltyCounts,
    slots: torch.Tensor,
    repetition: torch.Tensor | None,
    frequency: torch.Tensor | None,
    presence: torch.Tensor | None,
) -> None:
    """The penalties of ``apply_penalties`` on the dense counts, in place (arguments validated)."""
    if logits.numel() == 0:
        return
    index = slots.long()
    # rows whose penalties are all neutral are skipped, as in the C kernel
    active = torch.zeros(logits.shape[0], dtype=torch.bool)
    for values, neutral in ((repetition, 1.0), (frequency, 0.0), (presence, 0.0)):
        if values is not None:
            active |= values != neutral
    seen = (counts.seen.index_select(0, index) > 0) & active.unsqueeze(1)
    if repetition is not None:
        rp = repetition.unsqueeze(1)
        penalised = torch.where(logits < 0, logits * rp, logits / rp)
        logits.copy_(torch.where(seen & (rp != 1), penalised, logits))
    out = counts.out.index_select(0, index)
    used = seen & (out > 0)
    if frequency is not None:
        logits.copy_(torch.where(used, logits - frequency.unsqueeze(1) * out.float(), logits))
    if presence is not None:
        logits.copy_(torch.where(used, logits - presence.unsqueeze(1), logits))
