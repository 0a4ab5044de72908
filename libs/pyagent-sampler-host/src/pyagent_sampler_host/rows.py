"""Stable rows: each request keeps its row from step to step, and row changes become a BatchUpdate.

Samplers keep per-row state (see :mod:`pyagent_core.interfaces.sampler`), so a host that is handed
the list of requests to sample each step (rather than vLLM's deltas) keeps every request in the row
it got when it joined, fills the holes of requests that left with newcomers, then moves the last
rows into the remaining holes, and tells the samplers exactly that: removed, added, moved.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Generic, TypeVar

import attrs

from pyagent_core.interfaces.sampler import AddedRequest, BatchUpdate, MovedRequest, MoveKind, is_greedy

R = TypeVar("R")


@attrs.frozen
class RowRequest:
    """What the samplers see of a request: its parameters, prompt and live output list.

    Attributes:
        params: the request's sampler parameters, keyed as the samplers name them; parameters at their
            neutral value may be left out (a sampler then uses its option). ``temperature`` 0 makes
            the request greedy (see ``pyagent_core.interfaces.sampler.is_greedy``).
        prompt_token_ids: the prompt's token ids.
        output_token_ids: the host's live list of generated ids (it grows; samplers keep a reference).
    """

    params: Mapping[str, Any]
    prompt_token_ids: Sequence[int] = ()
    output_token_ids: list[int] = attrs.field(factory=list)

    @property
    def greedy(self) -> bool:
        """Whether the host chooses this request's tokens by argmax (its temperature is 0)."""
        return is_greedy(self.params)


class StableRows(Generic[R]):
    """The rows of the batch the samplers know, holding the host's request objects by identity.

    Args:
        describe: what the samplers see of a request (called once, when it joins).
    """

    def __init__(self, describe: Callable[[R], RowRequest]) -> None:
        self.describe = describe
        self.rows: list[R] = []
        self.greedy: list[bool] = []

    def update(self, sampled: Sequence[R]) -> BatchUpdate | None:
        """Make the rows hold exactly ``sampled``; return the changes (``None`` when there are none)."""
        wanted = {id(r) for r in sampled}
        present = {id(r) for r in self.rows}
        removed = [i for i, r in enumerate(self.rows) if id(r) not in wanted]
        newcomers = [r for r in sampled if id(r) not in present]
        if not removed and not newcomers:
            return None
        rows: list[tuple[R, bool] | None] = list(zip(self.rows, self.greedy, strict=True))
        for index in removed:
            rows[index] = None
        holes = list(removed)
        added = []
        for request in newcomers:
            index = holes.pop(0) if holes else len(rows)
            seen = self.describe(request)
            if index == len(rows):
                rows.append((request, seen.greedy))
            else:
                rows[index] = (request, seen.greedy)
            added.append(AddedRequest(index, seen.params, seen.prompt_token_ids, seen.output_token_ids))
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
        kept = [row for row in rows if row is not None]
        self.rows, self.greedy = [r for r, _ in kept], [g for _, g in kept]
        return BatchUpdate(batch_size=len(self.rows), removed=tuple(removed), added=tuple(added),
                           moved=tuple(moved))
