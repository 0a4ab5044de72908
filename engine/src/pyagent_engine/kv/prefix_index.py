"""Cached KV blocks by chained hash, with reference counts and leaves-first eviction through a policy.

One :class:`PrefixIndex` serves the device block pool (entry ids are block ids; a running request
takes a reference to each block it uses), the offload tier (entry ids are host slots; nothing takes
them) and the KV simulator behind ``pyagent bench kvcache`` (entry ids are a trace's block ids), so
the benchmark measures the pool the engine runs. Each entry knows its parent's hash, so the index
counts the cached children of every hash.

As the eviction interface prescribes, every cached entry with no references is in the policy
(inserted with its :class:`~pyagent_core.interfaces.eviction.BlockInfo`), so the policy sees every
reuse. A block with cached children is no legal victim: when the policy names one, the index parks
it and asks again; a parked block becomes *ready* when its last child goes, and ready blocks are
evicted first, oldest first. So a prefix is never cut in the middle, and an entry with references
is never in the policy at all.

The policy does not see entry ids, which the pools hand to other content at once (a device block is
reused the moment it is evicted), but *policy ids*, one per content: a hash that is dropped keeps its
policy id while the index remembers it, so when the same content is cached again the policy knows
it (a ghost hit). The index remembers the last ``policy.history + policy.capacity`` dropped hashes
(none for a policy without history); then the id is recycled and the policy told to ``forget`` it.
That covers every id a policy still remembers when its ghost list takes each id it evicts and lets
go of the oldest (``turn-aware`` and ``s3-fifo`` nearly so): the drops since it evicted an id exceed
its evictions since by at most the blocks parked then, at most the capacity. A ghost list that can
keep an id longer (ARC's B1 while T2 gives the victims) loses its ghosts older than that.

Unused entries always drain completely by repeated eviction, because the pools keep the rule that a
used entry's ancestors are used too (a request holds its whole prefix).
"""

from __future__ import annotations

from collections import Counter, OrderedDict

import attrs

from pyagent_core.errors import EvictionError
from pyagent_core.interfaces.eviction import BlockInfo, EvictionPolicy
from pyagent_engine.requests.request import BlockHash


@attrs.define
class CacheEntry:
    """One cached id.

    Attributes:
        key: its chained hash.
        parent: its parent's hash, ``None`` for a first block.
        depth: blocks before it in its chain (0 for a first block).
        tokens: tokens it holds (the block size, fewer for a trace's partial last block).
        policy_id: the id the eviction policy knows its content by.
        refs: running requests using it.
    """

    key: BlockHash
    parent: BlockHash | None
    depth: int
    tokens: int
    policy_id: int
    refs: int = 0


class PrefixIndex:
    """Hash -> id map over cached entries whose unused ones an eviction policy orders.

    Args:
        policy: an eviction policy whose capacity covers every id the index may hold.
        block_size: tokens per full block (reported to the policy).
    """

    def __init__(self, policy: EvictionPolicy, block_size: int) -> None:
        self.policy = policy
        self.block_size = block_size
        self.history = policy.history + policy.capacity if policy.history else 0
        """How many dropped hashes keep their policy ids."""
        self._ids: dict[BlockHash, int] = {}
        self._entries: dict[int, CacheEntry] = {}
        self._by_policy_id: dict[int, int] = {}
        self._remembered: OrderedDict[BlockHash, int] = OrderedDict()
        self._spare_policy_ids: list[int] = []
        self._next_policy_id = 0
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
        return (self._entries[entry_id].policy_id in self.policy or entry_id in self._parked
                or entry_id in self._ready)

    def add(self, entry_id: int, key: BlockHash, parent: BlockHash | None, depth: int, refs: int,
            tokens: int | None = None) -> None:
        """Cache ``entry_id`` under ``key`` with ``refs`` references (0: evictable at once).

        ``tokens`` defaults to a full block. The content gets back the policy id it had when it was
        last dropped, if the index still remembers it.
        """
        if key in self._ids or entry_id in self._entries:
            raise EvictionError(f"cannot cache id {entry_id}: it or its hash is already cached")
        policy_id = self._remembered.pop(key, None)
        if policy_id is None:
            policy_id = self._new_policy_id()
        self._entries[entry_id] = CacheEntry(key, parent, depth, self.block_size if tokens is None else tokens,
                                             policy_id, refs)
        self._ids[key] = entry_id
        self._by_policy_id[policy_id] = entry_id
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
        """Drop a reference to ``entry_id``; at zero the policy gets it back.

        A request gives its ids back last block first, so that a policy ordering by recency finds a
        chain's deepest blocks the oldest, and names leaves before their parents.
        """
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
            policy_id = self.policy.evict()
            entry_id = self._by_policy_id.get(policy_id, -1)
            entry = self._entries.get(entry_id)
            if entry is None or entry.refs:
                raise EvictionError(f"policy {type(self.policy).__name__} evicted block {policy_id}, which is "
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
        parent_id = None if entry.parent is None else self._ids.get(entry.parent)
        parent = None if parent_id is None else self._entries[parent_id].policy_id
        self.policy.insert_with_info(entry.policy_id, BlockInfo(entry.depth, entry.tokens, parent,
                                                                entry.tokens >= self.block_size))

    def _withdraw(self, entry_id: int) -> None:
        policy_id = self._entries[entry_id].policy_id
        if policy_id in self.policy:
            self.policy.remove(policy_id)
        elif entry_id in self._parked:
            self._parked.remove(entry_id)
        else:
            self._ready.pop(entry_id, None)

    def _drop(self, entry_id: int) -> CacheEntry:
        entry = self._entries.pop(entry_id)
        del self._ids[entry.key]
        del self._by_policy_id[entry.policy_id]
        self.num_unpinned -= 1
        self._remember(entry.key, entry.policy_id)
        if entry.parent is not None:
            self._children[entry.parent] -= 1
            if not self._children[entry.parent]:
                del self._children[entry.parent]
                parent_id = self._ids.get(entry.parent)
                if parent_id is not None and parent_id in self._parked:
                    self._parked.remove(parent_id)
                    self._ready[parent_id] = None
        return entry

    def _new_policy_id(self) -> int:
        if self._spare_policy_ids:
            return self._spare_policy_ids.pop()
        self._next_policy_id += 1
        return self._next_policy_id - 1

    def _remember(self, key: BlockHash, policy_id: int) -> None:
        """Keep ``policy_id`` for the dropped ``key``; recycle the id of the hash remembered longest."""
        self._remembered[key] = policy_id
        if len(self._remembered) > self.history:
            policy_id = self._remembered.popitem(last=False)[1]
            self.policy.forget(policy_id)
            self._spare_policy_ids.append(policy_id)
