"""A prefix cache of a fixed number of blocks, replaying requests block chain by block chain.

:class:`PrefixCache` holds what every replay shares: the longest-cached-prefix lookup (a hit counts
only for blocks whose whole prefix is cached, as in a prefix cache), the blocks the current request
uses (never evicted), and the leaves-first rule (a block whose longer-prefix children are cached is
never evicted, so the cached set stays closed under prefixes). Subclasses choose victims:
:class:`PrefixCachePool` asks an :class:`~pyagent_core.interfaces.eviction.EvictionPolicy`,
:class:`~pyagent_engine.kvcache.belady.BeladyCache` looks into the future.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections import OrderedDict
from collections.abc import Sequence

from pyagent_core.errors import EvictionError
from pyagent_core.interfaces.eviction import BlockInfo, EvictionPolicy


class PrefixCache(ABC):
    """Replays requests (chains of block ids) through a cache of ``capacity`` blocks.

    A request looks up its longest cached prefix (hits), uses those blocks, then caches its other
    blocks one by one, evicting a victim whenever the cache is full; when no block is evictable
    (everything cached is the request's own), the rest of the request is not cached. At the end the
    request gives its blocks back, last block first.
    """

    def __init__(self, capacity: int) -> None:
        if capacity <= 0:
            raise ValueError(f"capacity must be a positive number of blocks, got {capacity}")
        self.capacity = capacity
        self.children: dict[int, int] = {}
        """Cached block -> how many of its children are cached (0: a leaf)."""
        self.parent: dict[int, int | None] = {}
        self.in_use: set[int] = set()
        self.hits = 0
        self.requested = 0
        self.evictions = 0

    def serve(self, index: int, chain: Sequence[int], last_tokens: int, block_size: int) -> int:
        """Serve request ``index`` whose blocks are ``chain``; return how many blocks it found cached."""
        children = self.children
        hits = 0
        for block in chain:
            if block not in children:
                break
            hits += 1
        in_use = self.in_use
        for block in chain[:hits]:
            self._take(block)
            in_use.add(block)
        cached = hits
        parent = chain[hits - 1] if hits else None
        for block in chain[hits:]:
            if len(children) >= self.capacity:
                victim = self._victim()
                if victim is None:
                    break
                self._drop(victim)
            children[block] = 0
            self.parent[block] = parent
            if parent is not None:
                children[parent] += 1
            in_use.add(block)
            parent = block
            cached += 1
        in_use.clear()
        last = len(chain) - 1
        for depth in range(cached - 1, -1, -1):
            tokens = last_tokens if depth == last else block_size
            self._give_back(chain[depth], depth, tokens, tokens >= block_size)
        self.hits += hits
        self.requested += len(chain)
        return hits

    def _drop(self, block: int) -> None:
        children = self.children
        if block not in children or block in self.in_use or children[block]:
            raise EvictionError(f"{type(self).__name__} chose block {block} as a victim, but it is "
                                f"{'not cached' if block not in children else 'in use or has cached children'}")
        del children[block]
        parent = self.parent.pop(block)
        self.evictions += 1
        if parent is not None:
            children[parent] -= 1
            if not children[parent] and parent not in self.in_use:
                self._became_leaf(parent)

    @abstractmethod
    def _take(self, block: int) -> None:
        """The current request hit the cached, unused ``block`` and uses it from now on."""

    @abstractmethod
    def _victim(self) -> int | None:
        """A cached leaf no request uses, to evict; ``None`` if there is none."""

    @abstractmethod
    def _give_back(self, block: int, depth: int, tokens: int, full: bool) -> None:
        """The current request no longer uses ``block`` (its ``depth``-th block, holding ``tokens``;
        ``full`` unless it is a partial last block)."""

    @abstractmethod
    def _became_leaf(self, block: int) -> None:
        """The unused ``block`` lost its last cached child: it is now a legal victim."""


class PrefixCachePool(PrefixCache):
    """A prefix cache whose victims an eviction policy chooses, leaves first.

    Every cached block no request uses is in the policy, given with its :class:`BlockInfo`. When
    the policy names a block that still has cached children, the pool sets it aside and asks again;
    a set-aside block goes first once its last child is evicted (unless a request uses it before),
    so the policy's order is followed among the legal victims.
    """

    def __init__(self, capacity: int, policy: EvictionPolicy) -> None:
        super().__init__(capacity)
        self.policy = policy
        self.parked: set[int] = set()
        self.ready: OrderedDict[int, None] = OrderedDict()

    def _take(self, block: int) -> None:
        if block in self.policy:
            self.policy.remove(block)
        elif block in self.parked:
            self.parked.remove(block)
        else:
            del self.ready[block]

    def _victim(self) -> int | None:
        if self.ready:
            return self.ready.popitem(last=False)[0]
        policy, children = self.policy, self.children
        while len(policy):
            victim = policy.evict()
            if victim not in children or victim in self.in_use:
                raise EvictionError(f"policy {type(policy).__name__} evicted block {victim}, which is not "
                                    "one of its evictable blocks")
            if not children[victim]:
                return victim
            self.parked.add(victim)
        return None

    def _give_back(self, block: int, depth: int, tokens: int, full: bool) -> None:
        self.policy.insert_with_info(block, BlockInfo(depth, tokens, self.parent[block], full))

    def _became_leaf(self, block: int) -> None:
        if block in self.parked:
            self.parked.remove(block)
            self.ready[block] = None
