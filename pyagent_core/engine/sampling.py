"""The sampler chain: selected processors in order, then greedy or random token selection per row.

Samplers are batch-level objects (see :mod:`pyagent_core.interfaces.sampler`): they keep per-row
state, so the engine keeps each request in the same row from step to step and reports the
changes as a :class:`BatchUpdate` (removed, then added, then moved to fill the holes).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from pyagent_core.engine.request import Request
from pyagent_core.interfaces.sampler import (
    AddedRequest,
    BatchUpdate,
    LogitsProcessor,
    MovedRequest,
    MoveKind,
    TokenSelector,
)
from pyagent_core.registry import Registry, Selection

DEFAULT_PROCESSORS = ("temperature", "top_k", "top_p")
GREEDY, RANDOM = "greedy", "multinomial"


class SamplerRows:
    """Keeps each sampled request in a stable row and describes row changes as a :class:`BatchUpdate`."""

    def __init__(self) -> None:
        self.rows: list[Request] = []

    def update(self, sampled: Sequence[Request]) -> BatchUpdate | None:
        """Make the rows hold exactly ``sampled``; return the changes (``None`` when there are none)."""
        wanted = {id(r) for r in sampled}
        present = {id(r) for r in self.rows}
        removed = [i for i, r in enumerate(self.rows) if id(r) not in wanted]
        newcomers = [r for r in sampled if id(r) not in present]
        if not removed and not newcomers:
            return None
        rows: list[Request | None] = list(self.rows)
        for index in removed:
            rows[index] = None
        holes = list(removed)
        added = []
        for request in newcomers:
            index = holes.pop(0) if holes else len(rows)
            if index == len(rows):
                rows.append(request)
            else:
                rows[index] = request
            added.append(AddedRequest(index, request.params.sampler_params(),
                                      request.prompt_token_ids, request.output_token_ids))
        moved = []
        for hole in sorted(holes):
            while rows and rows[-1] is None:
                rows.pop()
            if hole >= len(rows):
                break
            rows[hole] = rows.pop()
            moved.append(MovedRequest(len(rows), hole, MoveKind.MOVE))
        while rows and rows[-1] is None:
            rows.pop()
        self.rows = [r for r in rows if r is not None]
        return BatchUpdate(batch_size=len(self.rows), removed=tuple(removed), added=tuple(added),
                           moved=tuple(moved))


class SamplerChain:
    """Processors selected through the registry, then the greedy and multinomial selectors.

    Args:
        registry: where the samplers are looked up.
        vocab_size: the model's vocabulary size.
        processors: processor names in chain order.
    """

    def __init__(self, registry: Registry, vocab_size: int,
                 processors: Sequence[str] = DEFAULT_PROCESSORS) -> None:
        self.selections = [registry.select("sampler", name) for name in (*processors, GREEDY, RANDOM)]
        built = [self._build(registry, s, vocab_size) for s in self.selections]
        self.processors: list[LogitsProcessor] = [p for p in built[:-2] if isinstance(p, LogitsProcessor)]
        self.greedy, self.random = built[-2], built[-1]
        if len(self.processors) != len(processors) or not all(
            isinstance(s, TokenSelector) for s in (self.greedy, self.random)
        ):
            raise TypeError("the sampler chain needs logits processors followed by token selectors")
        self.rows = SamplerRows()

    @staticmethod
    def _build(registry: Registry, selection: Selection, vocab_size: int) -> Any:
        return registry.load(selection.backend)(selection.options, vocab_size)

    @property
    def names(self) -> list[str]:
        """Names of the samplers in chain order (processors, then the two selectors)."""
        return [s.backend.name for s in self.selections]

    def sample(self, requests: Sequence[Request], logits: torch.Tensor) -> list[int]:
        """Draw one token per request; ``logits[i]`` belongs to ``requests[i]``.

        Rows are rearranged to the stable row order the samplers know, processed and selected.
        """
        update = self.rows.update(requests)
        for sampler in (*self.processors, self.greedy, self.random):
            sampler.update_state(update)
        order = {id(r): i for i, r in enumerate(requests)}
        index = torch.tensor([order[id(r)] for r in self.rows.rows], dtype=torch.long)
        batch = logits.index_select(0, index).float()
        greedy = torch.tensor([r.params.greedy for r in self.rows.rows])
        if bool(greedy.all()) and all(p.is_argmax_invariant() for p in self.processors):
            chosen = self.greedy.select(batch)
        else:
            for processor in self.processors:
                batch = processor.apply(batch)
            chosen = torch.where(greedy, self.greedy.select(batch), self.random.select(batch))
        tokens = chosen.tolist()
        by_request = {id(r): tokens[i] for i, r in enumerate(self.rows.rows)}
        return [by_request[id(r)] for r in requests]
