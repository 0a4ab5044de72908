"""The KV cache manager: the only code that allocates, moves or frees cache memory.

One memory budget (``kv_cache_gib``) buys the caches of every layer, cut into groups of layers
allocated alike (:mod:`pyagent_engine.kv.groups`). Token positions come in blocks of
``block_size``: a request holds a list of block ids (``Request.block_ids``, its block table), the
same ids in every layer's tensor. The block pool behind the manager hands them out; with prefix
caching it is a :class:`~pyagent_engine.kv.prefix_cache.PrefixCachingBlockPool`, which shares full
blocks between requests by hash and keeps evicted ones in a host-memory offload tier.

Who calls what:

- the scheduler admits a request (:meth:`KVCacheManager.acquire`: the blocks of its longest cached
  prefix), gives it blocks for the tokens it schedules (:meth:`~KVCacheManager.grow`), publishes
  what running requests computed (:meth:`~KVCacheManager.publish`) and releases a finished or
  preempted request's blocks (:meth:`~KVCacheManager.release`);
- the inputs stage asks where each new token goes (:meth:`~KVCacheManager.slots`, the core's
  :func:`~pyagent_core.interfaces.attention.cache_slots`) and hands the model :attr:`~KVCacheManager.caches`;
- the commit stage records what a step computed (:meth:`~KVCacheManager.commit`): for a verified
  draft, the accepted nodes' keys and values move to the positions of their depths and blocks
  holding nothing but rejected nodes go back to the pool.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

import torch

from pyagent_core.interfaces.attention import cache_slots
from pyagent_core.registry import Registry, Selection
from pyagent_core.types import EvictionSpec
from pyagent_engine.kv.block_pool import BlockPool
from pyagent_engine.kv.groups import CacheGroup, LayerCache, blocks_in_budget
from pyagent_engine.kv.memory import check_fits
from pyagent_engine.kv.prefix_cache import CacheCounters, CacheSettings, PrefixCachingBlockPool, build_block_pool

if TYPE_CHECKING:
    from pyagent_engine.requests.request import Request


class KVCacheManager:
    """The engine's cache memory: blocks of token positions over the groups' tensors.

    Args:
        pool: the block pool (a :class:`PrefixCachingBlockPool` with prefix caching).
        block_size: token positions per block.
        groups: the cache groups whose tensors the blocks index, with their caches allocated
            (none: block bookkeeping only, as a scheduler simulation needs).
    """

    def __init__(self, pool: BlockPool, block_size: int, groups: Sequence[CacheGroup] = ()) -> None:
        self.pool = pool
        self.block_size = block_size
        self.groups = tuple(groups)
        self.prefix_cache = pool if isinstance(pool, PrefixCachingBlockPool) else None
        by_layer = {layer: cache for group in self.groups for layer, cache in zip(group.layers, group.caches,
                                                                                    strict=True)}
        self.caches: list[LayerCache] = [by_layer[layer] for layer in sorted(by_layer)]
        """Every layer's cache, in layer order: the ``kv_caches`` of the model's forward."""
        self._counters = CacheCounters(pool)

    @property
    def num_blocks(self) -> int:
        """Blocks in the pool."""
        return self.pool.num_blocks

    @property
    def num_free(self) -> int:
        """Blocks that can be handed out now (with prefix caching: free plus evictable cached ones)."""
        return self.pool.num_free

    # --- the scheduler -------------------------------------------------------------------------

    def acquire(self, request: Request) -> int:
        """Give the block-less ``request`` the blocks of its longest cached prefix and count them as
        computed; return that prefix's length in tokens (0 without prefix caching)."""
        return 0 if self.prefix_cache is None else self.prefix_cache.acquire(request)

    def count_admission(self, request: Request, num_cached_tokens: int) -> None:
        """Count an admitted request (and the tokens :meth:`acquire` found cached) in the prefix-cache figures."""
        if self.prefix_cache is not None:
            self.prefix_cache.stats.admitted(request.num_tokens, num_cached_tokens)

    def match_length(self, request: Request) -> int:
        """Tokens of ``request`` :meth:`acquire` would find cached now (0 without prefix caching); changes nothing."""
        return 0 if self.prefix_cache is None else self.prefix_cache.match_length(request)

    def grow(self, request: Request, num_tokens: int) -> bool:
        """Give ``request`` blocks for ``num_tokens`` more positions; False (nothing taken) when the pool is short."""
        missing = -(-(request.num_computed_tokens + num_tokens) // self.block_size) - len(request.block_ids)
        if missing <= 0:
            return True
        blocks = self.pool.allocate(missing)
        if blocks is None:
            return False
        request.block_ids.extend(blocks)
        return True

    def publish(self, requests: Iterable[Request]) -> None:
        """Offer the full blocks ``requests`` have computed to the prefix cache (nothing without one)."""
        if self.prefix_cache is not None:
            for request in requests:
                self.prefix_cache.publish(request)

    def release(self, request: Request) -> None:
        """Take back every block of ``request`` (finished or preempted): published to the prefix cache
        first when there is one; ``request.block_ids`` is left empty."""
        if self.prefix_cache is not None:
            self.prefix_cache.release(request)
        else:
            self.pool.free(request.block_ids)
        request.block_ids = []

    # --- the step ------------------------------------------------------------------------------

    def slots(self, request: Request, positions: Iterable[int]) -> list[int]:
        """The cache slot of each of ``request``'s ``positions`` (its blocks must cover them)."""
        return cache_slots(request.block_ids, positions, self.block_size)

    def commit(self, request: Request, num_tokens: int, accepted: Sequence[int] = ()) -> None:
        """Record that ``num_tokens`` new positions of ``request`` were computed this step.

        When the request carried a draft (``request.draft``), its last ``len(draft)`` positions were
        the draft's nodes, node ``i`` at the slot of position ``first + i``: only the ``accepted``
        nodes (in depth order) count as computed, each node's keys and values move to the position of
        its depth, ``first + depth``, in every group, and blocks holding nothing but rejected nodes go
        back to the pool (the block of the next position stays).
        """
        draft = request.draft
        if draft is None:
            request.num_computed_tokens += num_tokens
            return
        first = request.num_computed_tokens + num_tokens - len(draft)
        moves = [(first + node, first + depth) for depth, node in enumerate(accepted) if node != depth]
        if moves:
            src = self.slots(request, [s for s, _ in moves])
            dst = self.slots(request, [d for _, d in moves])
            for group in self.groups:
                group.move_tokens(src, dst)
        request.num_computed_tokens = first + len(accepted)
        keep = -(-(request.num_computed_tokens + 1) // self.block_size)
        if len(request.block_ids) > keep:
            self.pool.free(request.block_ids[keep:])
            del request.block_ids[keep:]

    def take_counters(self) -> dict[str, Any]:
        """This step's prefix-cache figures for ``StepStats`` (see :class:`CacheCounters`)."""
        return self._counters.take()


def build_kv_manager(settings: CacheSettings, groups: Sequence[CacheGroup], budget_bytes: int,
                     registry: Registry, device: torch.device | str = "cpu",
                     ) -> tuple[KVCacheManager, Selection[EvictionSpec] | None]:
    """Size the blocks ``budget_bytes`` buy across ``groups``, allocate every group's caches, and build
    the manager with the block pool ``settings`` ask for; also return the eviction policy selection
    when prefix caching is on.

    Raises :class:`~pyagent_core.errors.ConfigError` when the caches would not fit in the memory
    ``device`` has available.
    """
    block_size = settings.block_size
    num_blocks = blocks_in_budget(groups, budget_bytes, block_size, 0)
    nbytes = num_blocks * block_size * sum(group.bytes_per_token() for group in groups)
    check_fits(nbytes, torch.device(device), f"the KV cache ({num_blocks} blocks of {block_size} tokens)",
               "lower kv_cache_gib (--kv-cache-gib)")
    for group in groups:
        group.allocate(num_blocks, block_size, 0, device)
    per_token = [cache for group in groups for cache in group.caches if isinstance(cache, torch.Tensor)]
    pool, selection = build_block_pool(settings, num_blocks, per_token, registry)  # the offload tier copies blocks
    return KVCacheManager(pool, block_size, groups), selection
