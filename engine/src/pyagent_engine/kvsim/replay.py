"""Serving a block trace's requests through the engine's own prefix index.

:class:`TraceCache` drives a :class:`~pyagent_engine.kv.prefix_index.PrefixIndex` the way the engine's
prefix-caching block pool does, so the simulator and ``pyagent bench kvcache`` measure the pool the
engine runs: the same leaves-first rule, reference counts, parked and ready blocks, and policy ids
that outlive a drop for the policy's history.
"""

from __future__ import annotations

from collections.abc import Sequence

from pyagent_core.interfaces.eviction import EvictionPolicy
from pyagent_engine.kv.prefix_index import PrefixIndex


class TraceCache:
    """A prefix cache of ``policy.capacity`` blocks serving requests given as chains of block ids.

    A request pins the blocks of its longest cached prefix (its hits), then caches its other blocks
    one by one with a reference, evicting an unused leaf whenever the cache is full; when nothing is
    evictable (everything cached is the request's own), the rest of the request is not cached. Then
    it gives every block back, last block first, as the engine releases a request. A trace's block
    ids are both the index's hashes and its entry ids.

    Two things differ from the engine by the nature of a trace: a request's partial last block is
    cached too (the policy learns it is partial from its
    :class:`~pyagent_core.interfaces.eviction.BlockInfo`), and every block of the longest cached
    prefix counts as a hit (the engine recomputes a prompt's last token).
    """

    def __init__(self, policy: EvictionPolicy) -> None:
        self.index = PrefixIndex(policy, policy.context.block_size)
        self.capacity = policy.capacity
        self.hits = 0
        self.requested = 0
        self.evictions = 0

    def serve(self, chain: Sequence[int], last_tokens: int) -> int:
        """Serve a request whose blocks are ``chain``, its last holding ``last_tokens`` tokens;
        return how many blocks it found cached."""
        index = self.index
        hits = 0
        for block in chain:
            if index.find(block) is None:
                break
            index.pin(block)
            hits += 1
        cached = hits
        last = len(chain) - 1
        for depth in range(hits, len(chain)):
            if len(index) >= self.capacity:
                if not index.num_unpinned:
                    break
                index.evict()
                self.evictions += 1
            block = chain[depth]
            index.add(block, block, chain[depth - 1] if depth else None, depth, refs=1,
                      tokens=last_tokens if depth == last else None)
            cached += 1
        self.give_back(chain[:cached])
        self.hits += hits
        self.requested += len(chain)
        return hits

    def give_back(self, blocks: Sequence[int]) -> None:
        """The request served now drops its references to ``blocks`` (its cached ones), last first."""
        for block in reversed(blocks):
            self.index.unpin(block)
