"""The records one stage of a step hands to the next (frozen: a stage never edits what it was given).

``ScheduledBatch`` (schedule) -> ``ModelInputs`` (prepare inputs) -> ``StepLogits`` (model forward)
-> ``MaskedLogits`` (logits processing and masks) -> ``Selection`` (select tokens; record logprobs
adds the records) -> commit -> append, detokenize and stop. Each names the requests it is about, in
the order of its rows.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import attrs

from pyagent_engine.requests.logprobs import TokenLogprob
from pyagent_engine.requests.request import Request
from pyagent_engine.scheduling.scheduler import ScheduledChunk, SchedulerOutput

if TYPE_CHECKING:
    import torch

    from pyagent_core.interfaces.attention import AttentionMetadata


@attrs.frozen
class ScheduledBatch:
    """What the schedule stage decided: the step's plan (its chunks in batch order, the requests
    preempted to make room, the tokens found in the prefix cache) and the requests that cannot run,
    each with the reason (a grammar that failed to compile, no KV blocks for the first waiting request)."""

    plan: SchedulerOutput
    failed: tuple[tuple[Request, str], ...] = ()


@attrs.frozen(eq=False)
class SampledRows:
    """The requests a token is chosen for this step and their logits rows: ``requests[i]`` owns the
    ``1 + len(draft)`` rows from ``offsets[i]`` on (its last real token, then each draft node in
    draft order; one row without a draft)."""

    requests: tuple[Request, ...]
    offsets: tuple[int, ...]
    num_rows: int

    @classmethod
    def of(cls, requests: Sequence[Request]) -> SampledRows:
        """The rows of ``requests`` laid out one after the other, in that order."""
        offsets, row = [], 0
        for request in requests:
            offsets.append(row)
            row += 1 + (0 if request.draft is None else len(request.draft))
        return cls(tuple(requests), tuple(offsets), row)

    def rows_of(self, index: int) -> range:
        """The rows of ``requests[index]``."""
        end = self.offsets[index + 1] if index + 1 < len(self.offsets) else self.num_rows
        return range(self.offsets[index], end)

    def subset(self, requests: Sequence[Request]) -> tuple[SampledRows, list[int] | None]:
        """The layout of ``requests`` (some of :attr:`requests`, in this order) on their own, and the
        rows of this layout they take (``None``: all of them, ``requests`` is the whole batch)."""
        if list(requests) == list(self.requests):
            return self, None
        where = {id(request): i for i, request in enumerate(self.requests)}
        taken = [row for request in requests for row in self.rows_of(where[id(request)])]
        return SampledRows.of(requests), taken


@attrs.frozen(eq=False)
class ModelInputs:
    """One forward's inputs, built by the inputs stage: the only place per-row model inputs are made.

    Attributes:
        chunks: the scheduled chunks they come from, in batch order.
        input_ids: ``int64 [num_tokens]``, the new tokens of every chunk (a draft's nodes after its
            request's last real token).
        positions: ``int64 [num_tokens]``, each token's position in its sequence (a draft node's: the
            last real token's plus its depth).
        metadata: where the tokens sit in the caches (block tables, slots, lengths, tree mask).
        logits_indices: ``int64``, the tokens whose logits come back: every row of :attr:`rows`,
            then the prompt positions of :attr:`prompt`.
        rows: the requests a token is chosen for, with their logits rows.
        prompt: per request that asks for prompt logprobs, the positions computed this step that
            score a prompt token; their logits rows follow the sampled ones, in this order.
        lora_slots: ``int32 [num_tokens]``, each token's LoRA slot (-1: the base model); ``None`` when
            every row runs the base model.
    """

    chunks: tuple[ScheduledChunk, ...]
    input_ids: torch.Tensor
    positions: torch.Tensor
    metadata: AttentionMetadata
    logits_indices: torch.Tensor
    rows: SampledRows
    prompt: tuple[tuple[Request, range], ...] = ()
    lora_slots: torch.Tensor | None = None


@attrs.frozen(eq=False)
class StepLogits:
    """What the forward returns: ``logits``, float32 ``[rows.num_rows, vocab]``, the rows of the
    sampled requests (:class:`SampledRows`), and ``prompt``, for each request that asks for prompt
    logprobs, the positions computed this step that score a prompt token and their logits rows."""

    rows: SampledRows
    logits: torch.Tensor
    prompt: tuple[tuple[Request, range, torch.Tensor], ...] = ()


@attrs.frozen(eq=False)
class MaskedLogits:
    """The logits sampling sees: the rows of ``rows`` with the grammar bitmask applied to the row of
    each constrained request; ``unmasked``, the same rows before the masks, when raw logprobs of a
    constrained request need them (else ``None``: ``logits`` is what raw logprobs read)."""

    rows: SampledRows
    logits: torch.Tensor
    unmasked: torch.Tensor | None = None


@attrs.frozen(eq=False)
class Selection:
    """The tokens each request emits this step, and what the later stages need about each.

    Attributes:
        requests: the requests, in row order.
        tokens: per request, the tokens it emits: the one chosen from its row, or for a verified draft
            the accepted nodes' tokens followed by the token chosen after the last of them.
        accepted: per request, the draft nodes verification accepted, in depth order (empty without a draft).
        rows: per request, the logits row each of its tokens was chosen from.
        processed: with ``processed`` logprobs, per request that asks for logprobs, the processed
            logits row (after the grammar mask and the whole sampler chain) each of its tokens was
            drawn from; ``None`` when the logits rows themselves are those (or logprobs are raw).
        logprobs: per request, the record of each of its tokens when it asks for logprobs (added by
            the record-logprobs stage); ``None`` when no request asks.
    """

    requests: tuple[Request, ...] = ()
    tokens: tuple[tuple[int, ...], ...] = ()
    accepted: tuple[tuple[int, ...], ...] = ()
    rows: tuple[tuple[int, ...], ...] = ()
    processed: tuple[tuple[torch.Tensor, ...], ...] | None = None
    logprobs: tuple[tuple[TokenLogprob, ...] | None, ...] | None = None
