"""Eviction-policy interface: which cached KV block to give up when a pool runs out of room.

A policy tracks the ids of *evictable* blocks: blocks that hold reusable cached content (a prefix
cache entry, an offloaded block) but that no running request is using. The pool inserts a block when
its last user releases it, touches it on a cache hit that does not take it (e.g. a lookup), removes
it when a request starts using it again or the pool drops it, and calls :meth:`EvictionPolicy.evict`
when it needs a free block. Pinned and in-use blocks are simply never in the policy, so a policy
cannot evict them. The same interface serves the device block pool and an offload tier.

Every operation is expected to run in O(1) amortised time (a hash map plus a linked list, a clock
hand, a few queues...): the pool calls them on every allocation.

Misuse raises :class:`~pyagent_core.errors.EvictionError`: evicting from an empty policy, inserting
an id that is already present or beyond the capacity, touching or removing an id that is absent.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from typing import Any

from pyagent_core.errors import EvictionError


class EvictionPolicy(ABC):
    """Orders evictable block ids and picks the next victim.

    Args:
        capacity: the most ids the policy holds at once (the pool's size); policies that keep
            history of evicted ids (ghost lists) size it from this.
        options: the policy's validated options (defaults filled in).
    """

    def __init__(self, capacity: int, options: Mapping[str, Any]) -> None:
        if capacity <= 0:
            raise ValueError(f"capacity must be a positive number of blocks, got {capacity}")
        self.capacity = capacity
        self.options = dict(options)

    @classmethod  # noqa: B027 - optional hook
    def check_available(cls) -> None:
        """Raise with a reason if this policy cannot run here (deep check, ``--check``)."""

    @abstractmethod
    def insert(self, block_id: int) -> None:
        """Start tracking ``block_id`` (a non-negative int) as evictable.

        Raises :class:`EvictionError` if it is already present or the policy holds ``capacity`` ids.
        """

    @abstractmethod
    def touch(self, block_id: int) -> None:
        """Record an access to the present ``block_id``; raises :class:`EvictionError` if absent."""

    @abstractmethod
    def remove(self, block_id: int) -> None:
        """Stop tracking the present ``block_id`` without evicting it; raises if absent."""

    @abstractmethod
    def evict(self) -> int:
        """Choose a present id, stop tracking it and return it; raises :class:`EvictionError` if empty."""

    @abstractmethod
    def __len__(self) -> int:
        """Number of ids currently tracked."""

    @abstractmethod
    def __contains__(self, block_id: object) -> bool:
        """Whether ``block_id`` is currently tracked."""

    def check_insert(self, block_id: int) -> None:
        """Raise :class:`EvictionError` if ``block_id`` cannot be inserted now (helper for subclasses)."""
        if block_id in self:
            raise EvictionError(f"block {block_id} is already in the eviction policy; remove it first")
        if len(self) >= self.capacity:
            raise EvictionError(
                f"eviction policy is full ({self.capacity} blocks); evict one before inserting {block_id}"
            )

    def check_present(self, block_id: int) -> None:
        """Raise :class:`EvictionError` if ``block_id`` is not tracked (helper for subclasses)."""
        if block_id not in self:
            raise EvictionError(f"block {block_id} is not in the eviction policy; it was never inserted, "
                                "or was removed or evicted")

    def check_not_empty(self) -> None:
        """Raise :class:`EvictionError` if there is nothing to evict (helper for subclasses)."""
        if len(self) == 0:
            raise EvictionError("nothing to evict: no evictable blocks; free or release blocks first")
