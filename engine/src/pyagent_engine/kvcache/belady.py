"""Belady's MIN under the prefix constraint: the offline optimum the policies are measured against.

When the cache is full, MIN evicts, among the cached leaves no request is using, the block whose
next use lies farthest in the future (never used again counts as farthest).

Why this respects the prefix constraint for free: a request that uses a block uses its whole
prefix, so a block is never next used later than its children are. The block used farthest in the
future among all unused cached blocks can therefore always be found among the leaves, and evicting
it keeps the cached set closed under prefixes, where a request's hits are simply its cached blocks.
Belady's exchange argument then applies to that set; the tests check MIN against an exhaustive
search over every legal eviction sequence on small traces and against every policy on samples.

Leaves are kept in a max-heap on next use with lazy invalidation: an entry is pushed whenever a
block becomes an unused leaf, and stale entries (block used again, evicted, or given a child since)
are skipped when popped, so each eviction costs O(log n) amortised.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence

from pyagent_engine.kvcache.pool import PrefixCache
from pyagent_engine.kvcache.trace import BlockTrace


def next_uses(trace: BlockTrace) -> list[list[int]]:
    """For each request and each of its blocks, the index of the next request using that block.

    Blocks never used again get ``len(trace.requests)``, later than any request.
    """
    never = len(trace.requests)
    upcoming: dict[int, int] = {}
    result: list[list[int]] = [[] for _ in trace.requests]
    for index in range(len(trace.requests) - 1, -1, -1):
        chain = trace.requests[index]
        result[index] = [upcoming.get(block, never) for block in chain]
        for block in chain:
            upcoming[block] = index
    return result


class BeladyCache(PrefixCache):
    """MIN over ``trace``: evicts the unused cached leaf whose next use is farthest away."""

    def __init__(self, capacity: int, trace: BlockTrace) -> None:
        super().__init__(capacity)
        self._next_uses = next_uses(trace)
        self._upcoming: dict[int, int] = {}
        self._heap: list[tuple[int, int]] = []

    def serve(self, index: int, chain: Sequence[int], last_tokens: int, block_size: int) -> int:
        """Serve request ``index`` (its position in the trace given at construction)."""
        self._upcoming.update(zip(chain, self._next_uses[index], strict=True))
        return super().serve(index, chain, last_tokens, block_size)

    def _take(self, block: int) -> None:
        """Nothing to do: the heap entries of ``block`` go stale as its next use moves on."""

    def _victim(self) -> int | None:
        heap, children, upcoming, in_use = self._heap, self.children, self._upcoming, self.in_use
        while heap:
            key, block = heapq.heappop(heap)
            if block in children and not children[block] and block not in in_use and upcoming[block] == -key:
                return block
        return None

    def _give_back(self, block: int, depth: int, tokens: int, full: bool) -> None:
        if not self.children[block]:
            heapq.heappush(self._heap, (-self._upcoming[block], block))

    def _became_leaf(self, block: int) -> None:
        heapq.heappush(self._heap, (-self._upcoming[block], block))
