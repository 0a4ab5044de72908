"""The offload tier: a host-memory store of KV blocks evicted from the device pool.

When the device pool evicts a cached block, its keys and values (every layer) are copied into a
host slot under the block's chained hash. A later lookup that misses on the device but finds the
hash here copies the block back into a fresh device block instead of recomputing it, and the slot
is freed (a block lives in one tier at a time). The tier has a capacity in blocks and its own
eviction policy over slots, consulted leaves first through a
:class:`~pyagent_engine.kv.prefix_index.PrefixIndex` exactly like the device pool.
"""

from __future__ import annotations

from collections import deque

import torch

from pyagent_core.interfaces.eviction import EvictionPolicy
from pyagent_engine.kv.prefix_index import PrefixIndex
from pyagent_engine.requests.request import BlockHash


class OffloadTier:
    """Host copies of evicted KV blocks, by hash.

    Args:
        kv_caches: the device caches of the per-token layers, block-major: ``cache[block_id]`` is one
            block of a layer (:meth:`~pyagent_engine.kv.layer_caches.LayerCaches.by_block`).
        policy: eviction policy over host slots; its capacity is the tier's capacity in blocks.
    """

    def __init__(self, kv_caches: list[torch.Tensor], policy: EvictionPolicy) -> None:
        self.kv_caches = kv_caches
        self.capacity = policy.capacity
        self.store = [torch.empty((self.capacity, *cache.shape[1:]), dtype=cache.dtype, device="cpu",
                                  pin_memory=cache.is_cuda) for cache in kv_caches]
        self.index = PrefixIndex(policy, block_size=policy.context.block_size)
        self._free: deque[int] = deque(range(self.capacity))
        self.num_saved = 0
        self.num_loaded = 0

    def holds(self, key: BlockHash) -> bool:
        """Whether a block is stored under ``key``."""
        return self.index.find(key) is not None

    def __len__(self) -> int:
        return len(self.index)

    def save(self, key: BlockHash, parent: BlockHash | None, depth: int, block_id: int) -> None:
        """Copy device block ``block_id`` (cached under ``key``, ``depth``-th of its chain) down.

        When the tier is full, its policy picks a host block to drop first (leaves first).
        """
        if self.index.find(key) is not None:
            return
        slot = self._free.popleft() if self._free else self.index.evict()[0]
        for store, cache in zip(self.store, self.kv_caches, strict=True):
            store[slot].copy_(cache[block_id], non_blocking=cache.is_cuda)
        self.index.add(slot, key, parent, depth, refs=0)
        self.num_saved += 1

    def load(self, key: BlockHash, block_id: int) -> bool:
        """Copy the block cached under ``key`` up into device block ``block_id`` and free its slot.

        Returns False (and copies nothing) when ``key`` is not here.
        """
        slot = self.index.find(key)
        if slot is None:
            return False
        for store, cache in zip(self.store, self.kv_caches, strict=True):
            cache[block_id].copy_(store[slot])
        self.index.discard(slot)
        self._free.append(slot)
        self.num_loaded += 1
        return True
