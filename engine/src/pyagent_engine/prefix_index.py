"""Cached KV blocks by chained hash, with reference counts and leaves-first eviction through a policy.

One :class:`PrefixIndex` serves the device block pool (ids are block ids; a running request takes a
reference to each block it uses) and the offload tier (ids are host slots; nothing takes them).
Each entry knows its parent's hash, so the index counts the cached children of every hash.

As the eviction interface prescribes, every cached entry with no references is in the policy
(inserted with its :class:`~pyagent_core.interfaces.eviction.BlockInfo`), so the policy sees every
reuse. A block with cached children is no legal victim: when the policy names one, the index parks
it and asks again; a parked block becomes *ready* when its last child goes, and ready blocks are
evicted first, oldest first. So a prefix is never cut in the middle, and an entry with references
is never in the policy at all. Ids are recycled, so the policy is told to ``forget`` a dropped id.

Unused entries always drain completely by repeated eviction, because the pools keep the rule that a
used entry's ancestors are used too (a request holds its whole prefix).
"""

from __future__ import annotations

from collections import Counter, OrderedDict

import attrs

from pyagent_core.errors import EvictionError
from pyagent_core.interfaces.eviction import BlockInfo, EvictionPolicy
from pyagent_engine.block_hash import BlockHash


@attrs.define
class CacheEntry:
    """One cached id: its hash, its parent's hash (``None`` for a first block), its depth in the
    chain (0 for a first block) and its reference count."""

    key: BlockHash
    parent: BlockHash | None
    depth: int
    refs: int = 0


class PrefixIndex:
    """Hash -> id map over cached entries whose unused ones an eviction policy orders.

    Args:
        policy: an eviction policy whose capacity covers every id the index may hold.
        block_size: tokens per block (reported to the policy).
    """

    def __init__(self, policy: EvictionPolicy, block_size: int) -> None:
        self.policy = policy
        self.block_size = block_size
        self._ids: dict[BlockHash, int] = {}
        self._entries: dict[int, CacheEntry] = {}
        self._children: Counter[BlockHash] = Counter()
        self._parked: set[int] = set()
        self._ready: OrderedDict[int, None] = OrderedDict()
        self.num_unpinned = 0

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, entry_id: object) -> bool:
        return entry_id in self._entries

    def find(self, key: BlockHash) -> int | None:
        """The id cached under ``key``, or ``None``."""
        return self._ids.get(key)

    def entry(self, entry_id: int) -> CacheEntry:
        """The entry of the cached ``entry_id``."""
        return self._entries[entry_id]

    def num_children(self, key: BlockHash) -> int:
        """How many cached entries extend the prefix ``key`` by one block."""
        return self._children[key]

    def is_evictable(self, entry_id: int) -> bool:
        """Whether the cached ``entry_id`` waits for eviction (in the policy, parked or ready)."""
        return entry_id in self.policy or entry_id in self._parked or entry_id in self._ready

    def add(self, entry_id: int, key: BlockHash, parent: BlockHash | None, depth: int, refs: int) -> None:
        """Cache ``entry_id`` under ``key`` with ``refs`` references (0: evictable at once)."""
        if key in self._ids or entry_id in self._entries:
            raise EvictionError(f"cannot cache id {entry_id}: it or its hash is already cached")
        self._entries[entry_id] = CacheEntry(key, parent, depth, refs)
        self._ids[key] = entry_id
        if parent is not None:
            self._children[parent] += 1
            parent_id = self._ids.get(parent)
            if parent_id is not None and parent_id in self._ready:
                del self._ready[parent_id]
                self._parked.add(parent_id)
        if refs == 0:
            self.num_unpinned += 1
            self._give_to_policy(entry_id)

    def pin(self, entry_id: int) -> None:
        """Take a reference to ``entry_id``; an entry with references is never evicted."""
        entry = self._entries[entry_id]
        entry.refs += 1
        if entry.refs == 1:
            self.num_unpinned -= 1
            self._withdraw(entry_id)

    def unpin(self, entry_id: int) -> None:
        """Drop a reference to ``entry_id``; at zero the policy gets it back."""
        entry = self._entries[entry_id]
        if entry.refs <= 0:
            raise EvictionError(f"block {entry_id} was released more often than it was taken")
        entry.refs -= 1
        if entry.refs == 0:
            self.num_unpinned += 1
            self._give_to_policy(entry_id)

    def evict(self) -> tuple[int, CacheEntry]:
        """Drop an unused leaf (ready ones first, then the policy's choice); return its id and entry.

        Raises :class:`EvictionError` when no entry is evictable.
        """
        if self._ready:
            entry_id = self._ready.popitem(last=False)[0]
            return entry_id, self._drop(entry_id)
        while True:
            entry_id = self.policy.evict()
            entry = self._entries.get(entry_id)
            if entry is None or entry.refs:
                raise EvictionError(f"policy {type(self.policy).__name__} evicted block {entry_id}, which is "
                                    "not one of its evictable blocks")
            if not self._children[entry.key]:
                return entry_id, self._drop(entry_id)
            self._parked.add(entry_id)

    def discard(self, entry_id: int) -> CacheEntry:
        """Drop the unused ``entry_id`` wherever it waits (an offloaded block moving back up)."""
        if self._entries[entry_id].refs:
            raise EvictionError(f"cannot drop block {entry_id}: a running request uses it")
        self._withdraw(entry_id)
        return self._drop(entry_id)

    def _give_to_policy(self, entry_id: int) -> None:
        entry = self._entries[entry_id]
        self.policy.insert_with_info(entry_id, BlockInfo(entry.depth, self.block_size,
                                                         None if entry.parent is None else self._ids.get(entry.parent)))

    def _withdraw(self, entry_id: int) -> None:
        if entry_id in self.policy:
            self.policy.remove(entry_id)
        elif entry_id in self._parked:
            self._parked.remove(entry_id)
        else:
            self._ready.pop(entry_id, None)

    def _drop(self, entry_id: int) -> CacheEntry:
        entry = self._entries.pop(entry_id)
        del self._ids[entry.key]
        self.num_unpinned -= 1
        self.policy.forget(entry_id)
        if entry.parent is not None:
            self._children[entry.parent] -= 1
            if not self._children[entry.parent]:
                del self._children[entry.parent]
                parent_id = self._ids.get(entry.parent)
                if parent_id is not None and parent_id in self._parked:
                    self._parked.remove(parent_id)
                    self._ready[parent_id] = None
        return entry
