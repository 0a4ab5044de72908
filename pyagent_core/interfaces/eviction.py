"""Eviction-policy interface: which cached KV block to give up when a pool runs out of room.

A policy tracks the ids of *evictable* blocks: blocks that hold reusable cached content (a prefix
cache entry, an offloaded block) but that no running request is using. The pool inserts a block when
its last user releases it, touches it on a cache hit that does not take it (e.g. a lookup), removes
it when a request starts using it again or the pool drops it, and calls :meth:`EvictionPolicy.evict`
when it needs a free block. Pinned and in-use blocks are simply never in the policy, so a policy
cannot evict them. The same interface serves the device block pool and an offload tier.

Every operation is expected to run in O(1) amortised time (a hash map plus a linked list, a clock
hand, a few queues...): the pool calls them on every allocation.

Prefix caches evict leaves first: a block whose longer-prefix children are still cached is no legal
victim. A pool keeps every evictable block in the policy (so recency and frequency stay intact) and,
when :meth:`EvictionPolicy.evict` returns a block that still has cached children, sets it aside and
evicts again; the set-aside block goes first once its last child is gone
(:class:`pyagent_engine.kv.prefix_index.PrefixIndex`, which the engine and ``pyagent bench kvcache`` share,
does this).

A policy is built as ``cls(options, context)``: its validated options and an :class:`EvictionContext`
(its capacity and the pool's block size). Pools give a policy two optional things:
:meth:`EvictionPolicy.insert_with_info` with a :class:`BlockInfo` (the block's depth in its prefix
chain, its tokens, its parent), which prefix- and cost-aware policies use and the others ignore; and
:meth:`EvictionPolicy.forget`, called when an id will name other content from now on, so that
policies keeping history of ids they no longer hold (ghost lists, counts of blocks a request took)
drop it. A policy that recognises ids after they left it (a ghost list) says for how many in
:attr:`EvictionPolicy.history`; a pool keeps a dropped content's id at least that long before giving
the id to other content, so the policy sees the content come back. An id that a request takes
(:meth:`EvictionPolicy.remove`) and later gives back (``insert``) is the same content reused: that is
how a policy sees a cache hit.

Misuse raises :class:`~pyagent_core.errors.EvictionError`: evicting from an empty policy, inserting
an id that is already present or beyond the capacity, touching or removing an id that is absent.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from typing import Any, NamedTuple

import attrs

from pyagent_core.errors import EvictionError


class BlockInfo(NamedTuple):
    """Where a cached block sits in its prefix chain: what prefix- and cost-aware policies weigh.

    Attributes:
        depth: blocks before it in its chain (0 for a sequence's first block); recomputing it means
            attending over ``depth`` earlier blocks.
        tokens: tokens it holds (the block size, or fewer for a sequence's last block).
        parent: id of the block before it in the chain, ``None`` at depth 0.
        full: whether it holds a whole block of tokens; a sequence's partial last block cannot be
            the prefix of a longer prompt (its next version holds more tokens and hashes apart).
    """

    depth: int
    tokens: int
    parent: int | None = None
    full: bool = True


def _positive(instance: object, attribute: attrs.Attribute[int], value: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise ValueError(f"{attribute.name} must be a positive number of "
                         f"{'blocks' if attribute.name == 'capacity' else 'tokens'}, got {value!r}")


@attrs.frozen
class EvictionContext:
    """What the host tells an eviction policy about the pool whose blocks it orders."""

    capacity: int = attrs.field(validator=_positive)
    """The most ids the policy holds at once: the pool's size in blocks. Policies that keep
    history of evicted ids (ghost lists) size it from this."""
    block_size: int = attrs.field(validator=_positive)
    """Tokens a full block of the pool holds: what a block inserted without a :class:`BlockInfo`
    is taken to hold."""


class EvictionPolicy(ABC):
    """Orders evictable block ids and picks the next victim.

    Args:
        options: the policy's validated options (defaults filled in).
        context: the pool it serves; :attr:`capacity` is ``context.capacity``.

    Attributes:
        history: the most ids this policy may still recognise after they left it (evicted ids kept
            in ghost lists); 0, the default, when it keeps none. A pool that recycles ids keeps a
            dropped content's id for at least this many later drops before it hands the id to other
            content (and calls :meth:`forget`). Set it in ``__init__``.
    """

    history: int = 0

    def __init__(self, options: Mapping[str, Any], context: EvictionContext) -> None:
        self.options = dict(options)
        self.context = context
        self.capacity = context.capacity

    @classmethod  # noqa: B027 - optional hook
    def check_available(cls) -> None:
        """Raise with a reason if this policy cannot run here (deep check, ``--check``)."""

    @abstractmethod
    def insert(self, block_id: int) -> None:
        """Start tracking ``block_id`` (a non-negative int) as evictable.

        Raises :class:`EvictionError` if it is already present or the policy holds ``capacity`` ids.
        """

    def insert_with_info(self, block_id: int, info: BlockInfo | None) -> None:
        """Insert ``block_id`` knowing where it sits in its prefix chain (``None``: unknown).

        Pools call this rather than :meth:`insert` when they know the block's place; the default
        ignores ``info``. Prefix- and cost-aware policies override it. Raises like :meth:`insert`.
        """
        self.insert(block_id)

    def forget(self, block_id: int) -> None:
        """Drop any history kept about the absent ``block_id``: the id will name other content.

        A pool that recycles ids (physical block numbers) calls this after evicting or dropping one;
        a pool whose ids are content hashes need not. The default keeps no history. Raises
        :class:`EvictionError` if the id is present (remove it first).
        """
        if block_id in self:
            raise EvictionError(f"cannot forget block {block_id}: it is still in the eviction policy; "
                                "remove or evict it first")

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
