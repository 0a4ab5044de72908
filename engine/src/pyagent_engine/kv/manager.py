"""The KV cache manager: the only code that allocates, moves or frees cache memory.

One memory budget (``kv_cache_gib``) buys the caches of every layer as the model's cache layout
declares them (:mod:`pyagent_engine.kv.layer_caches`): blocks for the layers that keep something
per token, and a state slot per running sequence for the layers that keep a state. Token positions
come in blocks of ``block_size``: a request holds a list of block ids (``Request.block_ids``, its
block table), the same ids in every per-token layer's tensor. A running request of a model with
state layers also holds a state slot (:meth:`KVCacheManager.state_slot`), the same index in every
state tensor, from admission to release: a preempted request gives it back and recomputes its
state from its tokens when it runs again. The block pool behind the manager hands them out; with prefix
caching it is a :class:`~pyagent_engine.kv.prefix_cache.PrefixCachingBlockPool`, which shares full
blocks between requests by hash and keeps evicted ones in a host-memory offload tier.

Who calls what:

- the scheduler admits a request (:meth:`KVCacheManager.acquire`: its state slot, the blocks of its
  longest cached prefix), gives it blocks for the tokens it schedules (:meth:`~KVCacheManager.grow`), publishes
  what running requests computed (:meth:`~KVCacheManager.publish`) and releases a finished or
  preempted request's blocks (:meth:`~KVCacheManager.release`);
- the inputs stage asks where each new token goes (:meth:`~KVCacheManager.slots`, the core's
  :func:`~pyagent_core.interfaces.attention.cache_slots`) and each request's state slot, and the
  forward stage hands the model :attr:`~KVCacheManager.caches`;
- the commit stage records what a step computed (:meth:`~KVCacheManager.commit`): for a verified
  draft, the accepted nodes' keys and values move to the positions of their depths and blocks
  holding nothing but rejected nodes go back to the pool.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

import torch

from pyagent_core.errors import ConfigError
from pyagent_core.interfaces.attention import cache_slots
from pyagent_core.interfaces.cache import CacheLayout
from pyagent_core.registry import Registry, Selection
from pyagent_core.types import EvictionSpec
from pyagent_engine.kv.block_pool import BlockPool
from pyagent_engine.kv.layer_caches import LayerCache, LayerCaches, plan_caches
from pyagent_engine.kv.memory import check_fits
from pyagent_engine.kv.prefix_cache import CacheCounters, CacheSettings, PrefixCachingBlockPool, build_block_pool

if TYPE_CHECKING:
    from pyagent_engine.requests.request import Request


class KVCacheManager:
    """The engine's cache memory: blocks of token positions and state slots over the layers' tensors.

    Args:
        pool: the block pool (a :class:`PrefixCachingBlockPool` with prefix caching).
        block_size: token positions per block.
        layers: the layers' allocated caches (none: block bookkeeping only, as a scheduler simulation needs).
        num_slots: state slots in ``layers``' state tensors (0: the model keeps no state).
    """

    def __init__(self, pool: BlockPool, block_size: int, layers: LayerCaches | None = None,
                 num_slots: int = 0) -> None:
        self.pool = pool
        self.block_size = block_size
        self.layers = layers
        self.prefix_cache = pool if isinstance(pool, PrefixCachingBlockPool) else None
        self.caches: list[LayerCache] = [] if layers is None else layers.tensors
        """Every layer's cache, in layer order: the ``kv_caches`` of the model's forward."""
        self.num_slots = num_slots
        self._free_slots = list(range(num_slots - 1, -1, -1))
        self._slots: dict[str, int] = {}
        self._counters = CacheCounters(pool)

    @property
    def num_free_slots(self) -> int:
        """State slots not held by a running request."""
        return len(self._free_slots)

    def state_slot(self, request: Request) -> int:
        """The state slot ``request`` holds (from :meth:`acquire` to :meth:`release`)."""
        return self._slots[request.request_id]

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
        """Give the block-less ``request`` a state slot (when the model keeps state) and the blocks of its
        longest cached prefix, counted as computed; return that prefix's length in tokens (0 without
        prefix caching).

        Raises :class:`ConfigError` when every state slot is held (the scheduler runs at most as many
        requests as there are slots).
        """
        if self.num_slots:
            if not self._free_slots:
                raise ConfigError(f"all {self.num_slots} state slots are held; run at most that many requests")
            self._slots[request.request_id] = self._free_slots.pop()
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
        """Take back every block of ``request`` (finished or preempted), published to the prefix cache
        first when there is one (``request.block_ids`` is left empty), and its state slot."""
        slot = self._slots.pop(request.request_id, None)
        if slot is not None:
            self._free_slots.append(slot)
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
        its depth, ``first + depth``, in every per-token layer, and blocks holding nothing but rejected nodes go
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
            if self.layers is not None:
                self.layers.move_tokens(src, dst)
        request.num_computed_tokens = first + len(accepted)
        keep = -(-(request.num_computed_tokens + 1) // self.block_size)
        if len(request.block_ids) > keep:
            self.pool.free(request.block_ids[keep:])
            del request.block_ids[keep:]

    def take_counters(self) -> dict[str, Any]:
        """This step's prefix-cache figures for ``StepStats`` (see :class:`CacheCounters`)."""
        return self._counters.take()


def build_kv_manager(settings: CacheSettings, layout: CacheLayout, budget_bytes: int, dtype: torch.dtype,
                     max_num_seqs: int, max_model_len: int, registry: Registry, device: torch.device | str = "cpu",
                     ) -> tuple[KVCacheManager, Selection[EvictionSpec] | None]:
    """Size the blocks and state slots ``budget_bytes`` buy for ``layout``
    (:func:`~pyagent_engine.kv.layer_caches.plan_caches`), allocate every layer's cache, and build the
    manager with the block pool ``settings`` ask for; also return the eviction policy selection when
    prefix caching is on.

    Raises :class:`~pyagent_core.errors.ConfigError` when the budget buys no block beside the state
    slots, or the caches would not fit in the memory ``device`` has available.
    """
    block_size = settings.block_size
    plan = plan_caches(layout, budget_bytes, block_size, max_num_seqs, dtype.itemsize, max_model_len)
    what = f"{plan.num_blocks} blocks of {block_size} tokens" if layout.paged else ""
    what = " and ".join(filter(None, [what, f"{plan.num_slots} state slots" if plan.num_slots else ""]))
    check_fits(plan.nbytes, torch.device(device), f"the KV cache ({what})", "lower kv_cache_gib (--kv-cache-gib)")
    layers = LayerCaches(layout, plan, block_size, dtype, device)
    pool, selection = build_block_pool(settings, plan.num_blocks, layers.by_block(), registry)
    return KVCacheManager(pool, block_size, layers, plan.num_slots), selection
