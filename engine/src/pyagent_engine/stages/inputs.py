"""Stage 2, prepare inputs: the scheduled chunks as the tensors of one forward.

This is the one place where per-row model inputs are built: token ids, positions, cache slots
(from the KV manager), block tables, sequence lengths, state slots (for a model with recurrent
layers), the draft-tree mask and the rows whose logits come back, and each row's LoRA slot (its
request's, :attr:`Request.lora_slot`).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from pyagent_core.interfaces.attention import AttentionMetadata
from pyagent_engine.kv.manager import KVCacheManager
from pyagent_engine.requests.request import Request
from pyagent_engine.scheduling.scheduler import ScheduledChunk
from pyagent_engine.spec.tree import draft_positions, tree_mask
from pyagent_engine.stages.records import ModelInputs, SampledRows


class PrepareInputs:
    """Builds :class:`ModelInputs` from a step's chunks.

    A chunk computes its request's tokens from ``num_computed_tokens`` on. A request carrying a
    draft (``request.draft``) gets ``1 + len(draft)`` rows: its last real token, then each draft node
    (see :mod:`pyagent_engine.spec.decoder`), node ``i`` at position ``last + depth(i)`` (the rotary
    embedding it would have if accepted) in the slot of position ``last + 1 + i``, seeing only its
    ancestors through the tree mask. A request that asks for prompt logprobs also gets the rows of
    its positions that score prompt tokens (:meth:`Request.prompt_positions`).

    Args:
        kv: the KV manager, which says where each token goes.
    """

    def __init__(self, kv: KVCacheManager) -> None:
        self.kv = kv

    def run(self, chunks: Sequence[ScheduledChunk]) -> ModelInputs:
        """The inputs of ``chunks``; the sampled requests' rows come first among the logits rows, in batch order."""
        ids: list[int] = []
        positions: list[int] = []
        slots: list[int] = []
        seq_lens: list[int] = []
        starts = [0]
        last_rows: list[range] = []  # the token indices whose logits a sampled request's rows are
        prompt: list[tuple[Request, range, range]] = []  # request, positions, their token indices
        for chunk in chunks:
            request = chunk.request
            start = request.num_computed_tokens
            stop = start + chunk.num_tokens
            ids.extend(request.token_ids(start, stop))
            positions.extend(range(start, stop))
            slots.extend(self.kv.slots(request, range(start, stop)))
            draft = request.draft
            if draft is not None:
                ids.extend(draft.token_ids)
                positions[len(positions) - len(draft):] = draft_positions(start, draft)
            scored = request.prompt_positions(start, stop)
            if scored:
                first = starts[-1] + scored.start - start
                prompt.append((request, scored, range(first, first + len(scored))))
            seq_lens.append(stop)
            starts.append(starts[-1] + chunk.num_tokens)
            if chunk.sample:
                last_rows.append(range(starts[-1] - 1 - (0 if draft is None else len(draft)), starts[-1]))
        width = max(len(c.request.block_ids) for c in chunks)
        tables = [[*c.request.block_ids, *[0] * (width - len(c.request.block_ids))] for c in chunks]
        metadata = AttentionMetadata(
            block_tables=torch.tensor(tables, dtype=torch.int32),
            slot_mapping=torch.tensor(slots, dtype=torch.int64),
            seq_lens=torch.tensor(seq_lens, dtype=torch.int32),
            query_start_loc=torch.tensor(starts, dtype=torch.int32),
            max_query_len=max(c.num_tokens for c in chunks),
            max_seq_len=max(seq_lens),
            tree_mask=tree_mask(chunks, max(c.num_tokens for c in chunks)),
            state_slots=torch.tensor([self.kv.state_slot(c.request) for c in chunks], dtype=torch.int64)
            if self.kv.num_slots else None,
        )
        indices = [i for rows in last_rows for i in rows]
        for _, _, token_indices in prompt:
            indices.extend(token_indices)
        return ModelInputs(
            chunks=tuple(chunks), input_ids=torch.tensor(ids, dtype=torch.long),
            positions=torch.tensor(positions, dtype=torch.long), metadata=metadata,
            logits_indices=torch.tensor(indices, dtype=torch.long),
            rows=SampledRows.of([c.request for c in chunks if c.sample]),
            prompt=tuple((request, scored) for request, scored, _ in prompt),
            lora_slots=_lora_slots(chunks),
        )


def _lora_slots(chunks: Sequence[ScheduledChunk]) -> torch.Tensor | None:
    """Each row's LoRA slot, its request's (a draft's nodes too); ``None`` when all run the base model."""
    if all(c.request.lora_slot < 0 for c in chunks):
        return None
    return torch.tensor([c.request.lora_slot for c in chunks for _ in range(c.num_tokens)], dtype=torch.int32)
