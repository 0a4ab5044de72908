"""Belady's MIN under the prefix constraint: the offline optimum the policies are measured against.

When the cache is full, MIN evicts, among the cached blocks no request is using, the block whose
next use lies farthest in the future (never used again counts as farthest). It runs as an eviction
policy, :class:`BeladyPolicy`, over the same :class:`~pyagent_engine.kv.prefix_index.PrefixIndex` as
every other policy; :class:`BeladyCache` is the trace cache that tells it, as each request gives its
blocks back, when each is next used.

Why this respects the prefix constraint for free: a request that uses a block uses its whole
prefix, so a block is never next used later than its children are. Among the unused cached blocks
used farthest in the future, the deepest is therefore a leaf, and MIN breaks ties by depth (deepest
first), so it never names a block with cached children and the index never has to park one.
Evicting it keeps the cached set closed under prefixes, where a request's hits are simply its
cached blocks, and Belady's exchange argument applies to that set; the tests check MIN against an
exhaustive search over every legal eviction sequence on small traces and against every policy on
samples.

The policy keeps its ids in a max-heap on (next use, depth) with lazy invalidation: an entry is
pushed on every insert, and stale entries (id taken by a request since, or evicted) are skipped when
popped, so each eviction costs O(log n) amortised.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence

from pyagent_core.errors import EvictionError
from pyagent_core.interfaces.eviction import BlockInfo, EvictionContext, EvictionPolicy
from pyagent_engine.kvsim.replay import TraceCache
from pyagent_engine.kvsim.trace import BlockTrace


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


class BeladyPolicy(EvictionPolicy):
    """MIN as an eviction policy: evicts the id next used farthest away (ties: the deepest block).

    It cannot see the future by itself: whoever drives it calls :meth:`expect` with an id's next use
    before inserting the id. Not a plugin (it needs the whole trace), so it takes no options.
    """

    def __init__(self, context: EvictionContext) -> None:
        super().__init__({}, context)
        self._next_use: dict[int, int] = {}
        self._present: dict[int, tuple[int, int]] = {}
        """Present id -> its heap key (minus next use, minus depth)."""
        self._heap: list[tuple[int, int, int]] = []

    def expect(self, block_id: int, next_use: int) -> None:
        """Record that the content known as ``block_id`` is next used by request ``next_use``."""
        self._next_use[block_id] = next_use

    def insert(self, block_id: int) -> None:
        """Insert ``block_id`` as a first block (depth 0)."""
        self.insert_with_info(block_id, None)

    def insert_with_info(self, block_id: int, info: BlockInfo | None) -> None:
        """Queue ``block_id`` by its expected next use and its depth (0 when ``info`` is ``None``)."""
        self.check_insert(block_id)
        self._push(block_id, 0 if info is None else -info.depth)

    def _push(self, block_id: int, minus_depth: int) -> None:
        next_use = self._next_use.get(block_id)
        if next_use is None:
            raise EvictionError(f"MIN knows no next use of block {block_id}; call expect() before inserting it")
        key = (-next_use, minus_depth)
        self._present[block_id] = key
        heapq.heappush(self._heap, (*key, block_id))

    def touch(self, block_id: int) -> None:
        """Re-queue ``block_id`` by its expected next use now."""
        self.check_present(block_id)
        self._push(block_id, self._present[block_id][1])

    def remove(self, block_id: int) -> None:
        """Stop tracking ``block_id`` (its heap entries go stale)."""
        self.check_present(block_id)
        del self._present[block_id]

    def forget(self, block_id: int) -> None:
        """Drop the expected next use of the absent ``block_id``."""
        super().forget(block_id)
        self._next_use.pop(block_id, None)

    def evict(self) -> int:
        """Stop tracking the id next used farthest away (the deepest of those) and return it."""
        self.check_not_empty()
        heap, present = self._heap, self._present
        while True:
            minus_next, minus_depth, block_id = heapq.heappop(heap)
            if present.get(block_id) == (minus_next, minus_depth):
                del present[block_id]
                return block_id

    def __len__(self) -> int:
        return len(self._present)

    def __contains__(self, block_id: object) -> bool:
        return block_id in self._present


class BeladyCache(TraceCache):
    """A trace cache whose victims MIN over ``trace`` chooses; serve the trace's requests in order."""

    def __init__(self, trace: BlockTrace, capacity: int) -> None:
        self.oracle = BeladyPolicy(EvictionContext(capacity, trace.block_size))
        super().__init__(self.oracle)
        self.trace = trace
        self._next_uses = next_uses(trace)
        self._served = 0

    def serve(self, chain: Sequence[int], last_tokens: int) -> int:
        """Serve the trace's next request, which must be ``chain``."""
        if self._served >= len(self.trace.requests) or tuple(chain) != self.trace.requests[self._served]:
            raise ValueError(f"MIN replays {self.trace.name} in order: request {self._served + 1} is not {chain}")
        hits = super().serve(chain, last_tokens)
        self._served += 1
        return hits

    def give_back(self, blocks: Sequence[int]) -> None:
        """Tell MIN when each block is next used, then give the blocks back."""
        index, oracle = self.index, self.oracle
        for block, next_use in zip(blocks, self._next_uses[self._served], strict=False):
            oracle.expect(index.entry(block).policy_id, next_use)
        super().give_back(blocks)
