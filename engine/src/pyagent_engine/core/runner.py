"""Turns a scheduled step into tensors, runs the model with the selected attention backend, returns logits."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any

import attrs
import torch

from pyagent_core.interfaces.attention import AttentionBackend, AttentionMetadata
from pyagent_engine.kv.manager import KVCacheManager
from pyagent_engine.requests.request import Request
from pyagent_engine.scheduling.scheduler import ScheduledChunk
from pyagent_engine.spec.tree import draft_positions, tree_mask


@contextlib.contextmanager
def torch_on_one_thread() -> Iterator[None]:
    """Run torch's own ops on the calling thread for the duration of an engine step.

    The linear layers (the C kernel, on the runner's threads) carry the work; torch's ops between
    them are small, and OpenMP workers they wake keep spinning on the other cores afterwards,
    slowing the kernel's helper threads (single-stream decode measured 11% faster without them).
    It spans a whole step, so steps that follow each other never resize torch's thread team.
    """
    previous = torch.get_num_threads()
    if previous == 1:
        yield
        return
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


@attrs.frozen
class StepLogits:
    """What a step's forward returns: ``sampled``, the logits rows of the sampled requests (see
    :meth:`ModelRunner.execute`), and ``prompt``, for each request that asks for prompt logprobs,
    the positions computed this step that score a prompt token and their logits rows."""

    sampled: torch.Tensor
    prompt: tuple[tuple[Request, range, torch.Tensor], ...] = ()


class ModelRunner:
    """Calls ``model.forward`` once per step over the KV manager's caches.

    Args:
        model: a model with ``forward(input_ids, positions, kv_caches, metadata, attention,
            logits_indices)`` returning float32 logits for the requested token indices.
        attention: the selected attention backend instance.
        kv: the KV manager: the caches and where each token goes.
    """

    def __init__(self, model: Any, attention: AttentionBackend, kv: KVCacheManager) -> None:
        self.model = model
        self.attention = attention
        self.kv = kv
        self.threads = torch.get_num_threads()

    def execute(self, chunks: Sequence[ScheduledChunk], sampled: Sequence[Request]) -> StepLogits:
        """Compute the chunks' tokens; return logits ``[len(sampled), vocab]`` in ``sampled`` order.

        A request carrying a draft (``request.draft``) gets ``1 + len(draft)`` rows instead of one:
        its last real token, then each draft node (see :mod:`pyagent_engine.spec.decoder`). A request
        that asks for prompt logprobs also gets the rows of its positions that score prompt tokens
        (:meth:`Request.prompt_positions`), in :attr:`StepLogits.prompt`.
        """
        ids: list[int] = []
        positions: list[int] = []
        slots: list[int] = []
        seq_lens: list[int] = []
        starts = [0]
        rows: dict[int, range] = {}
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
            rows[id(request)] = range(starts[-1] - 1 - (0 if draft is None else len(draft)), starts[-1])
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
        )
        indices = [i for r in sampled for i in rows[id(r)]]
        num_sampled = len(indices)
        for _, _, token_indices in prompt:
            indices.extend(token_indices)
        with torch.inference_mode():
            logits = self.model.forward(
                torch.tensor(ids, dtype=torch.long), torch.tensor(positions, dtype=torch.long),
                self.kv.caches, metadata, self.attention, torch.tensor(indices, dtype=torch.long),
                threads=self.threads,
            )
        if not prompt:
            return StepLogits(logits)
        parts, row = [], num_sampled
        for request, scored, _ in prompt:
            parts.append((request, scored, logits[row:row + len(scored)]))
            row += len(scored)
        return StepLogits(logits[:num_sampled], tuple(parts))
