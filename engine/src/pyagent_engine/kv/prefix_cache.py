"""Prefix caching: a block pool whose full blocks are shared, by chained hash, between requests.

A request's full blocks are hashed (:mod:`pyagent_engine.kv.block_hash`); once a block's tokens
are computed it is published under its hash. A new request takes the cached blocks of its longest
cached prefix (taking a reference to each) and starts computing after them; the last prompt token
is always recomputed so the request has logits to sample from. When a request finishes or is
preempted its references are dropped; a cached block nobody uses stays in the cache, evictable, and
the eviction policy (a registry plugin) picks which to reuse when the free list runs dry, leaves
first (:mod:`pyagent_engine.kv.prefix_index`). With an offload tier, an evicted block's KV goes to
host memory and comes back up on a later hit.

Per request, ``SamplingParams.cache_salt`` isolates tenants and the LoRA adapter isolates adapters (both
mixed into the first block's hash: :attr:`~pyagent_engine.requests.request.Request.prefix_salt`), and
``SamplingParams.skip_prefix_cache`` keeps a request out of the cache entirely: it neither reads
cached blocks nor publishes its own. A request that asks for prompt logprobs
(``SamplingParams.prompt_logprobs``) needs the logits of every prompt position, so until they are
all scored it reads nothing from the cache (as vLLM does); it still publishes its blocks.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

import attrs
import torch

from pyagent_core.errors import ConfigError
from pyagent_core.interfaces.eviction import EvictionContext, EvictionPolicy
from pyagent_core.kinds import EVICTION
from pyagent_core.registry import Registry, Selection
from pyagent_core.types import EvictionSpec
from pyagent_engine.kv.block_hash import HashFunction, extend_block_hashes, hash_function
from pyagent_engine.kv.block_pool import BlockPool
from pyagent_engine.kv.offload import OffloadTier
from pyagent_engine.kv.prefix_index import PrefixIndex
from pyagent_engine.requests.request import BlockHash

if TYPE_CHECKING:
    from pyagent_engine.requests.request import Request


class CacheSettings(Protocol):
    """The cache settings that :func:`check_cache_config` and :func:`build_block_pool` read (the engine's
    :class:`~pyagent_engine.core.config.EngineConfig` has them; see it for their meaning)."""

    @property
    def block_size(self) -> int: ...
    @property
    def prefix_caching(self) -> bool: ...
    @property
    def eviction(self) -> str | None: ...
    @property
    def eviction_options(self) -> Mapping[str, Any]: ...
    @property
    def kv_hash(self) -> str: ...
    @property
    def offload_blocks(self) -> int: ...


def check_cache_config(config: CacheSettings) -> None:
    """Raise :class:`ConfigError` if ``config``'s cache settings do not fit."""
    hash_function(config.kv_hash)
    if not isinstance(config.offload_blocks, int) or config.offload_blocks < 0:
        raise ConfigError(f"offload_blocks must be an integer >= 0, got {config.offload_blocks!r}")
    if not config.prefix_caching:
        needs = [name for name, on in (("an offload tier", config.offload_blocks > 0),
                                       ("an eviction policy", config.eviction is not None)) if on]
        if needs:
            raise ConfigError(f"{' and '.join(needs)} needs prefix caching; turn it on (--prefix-caching)")


@attrs.define
class PrefixCacheStats:
    """Running totals of a prefix-caching pool.

    Attributes:
        queried_tokens: tokens of admitted requests (each admission, re-admissions after preemption too).
        hit_tokens: of those, tokens found cached (on the device or in the offload tier).
        evicted_blocks: cached device blocks given up to make room.
    """

    queried_tokens: int = 0
    hit_tokens: int = 0
    evicted_blocks: int = 0

    def admitted(self, num_tokens: int, num_cached_tokens: int) -> None:
        """Count an admitted request of ``num_tokens`` tokens, ``num_cached_tokens`` of them cached."""
        self.queried_tokens += num_tokens
        self.hit_tokens += num_cached_tokens


class PrefixCachingBlockPool(BlockPool):
    """A :class:`BlockPool` whose full blocks are cached and shared by hash.

    Blocks are free (on the free list), cached (in the index, with a reference count) or held by
    exactly one request without being cached (partial blocks, duplicates, skip-cache requests).
    :attr:`num_free` counts the free blocks plus the cached blocks no request uses, since those can
    be evicted whenever a block is needed.

    Args:
        num_blocks: blocks in the pool.
        block_size: tokens per block.
        policy: eviction policy over block ids (capacity ``num_blocks``).
        hasher: the block hash function (see :func:`~pyagent_engine.kv.block_hash.hash_function`).
        offload: the tier evicted blocks go down to, or ``None``.
    """

    def __init__(self, num_blocks: int, block_size: int, policy: EvictionPolicy, hasher: HashFunction,
                 offload: OffloadTier | None = None) -> None:
        super().__init__(num_blocks)
        self.block_size = block_size
        self.index = PrefixIndex(policy, block_size)
        self.hasher = hasher
        self.offload = offload
        self.stats = PrefixCacheStats()
        self._published: dict[Request, int] = {}  # blocks published so far, per holding request

    @property
    def num_free(self) -> int:
        """Blocks that can be handed out now: free ones plus evictable cached ones."""
        return len(self._free) + self.index.num_unpinned

    @property
    def num_cached(self) -> int:
        """Blocks holding cached content (in use or not)."""
        return len(self.index)

    def allocate(self, count: int) -> list[int] | None:
        """``count`` blocks, evicting cached ones as needed, or ``None`` (nothing taken) when too few."""
        if count > self.num_free:
            return None
        return [self._take() for _ in range(count)]

    def _take(self) -> int:
        if self._free:
            return self._free.popleft()
        block_id, entry = self.index.evict()
        self.stats.evicted_blocks += 1
        if self.offload is not None:
            self.offload.save(entry.key, entry.parent, entry.depth, block_id)
        return block_id

    def free(self, blocks: Iterable[int]) -> None:
        """Drop one reference to each block; uncached blocks go straight back to the free list."""
        for block_id in blocks:
            if block_id in self.index:
                self.index.unpin(block_id)
            else:
                self._free.append(block_id)

    # --- requests ------------------------------------------------------------------------------

    def _hashes(self, request: Request, num_blocks: int) -> list[BlockHash]:
        extend_block_hashes(request.block_hashes, request.token_ids, self.block_size,
                            request.prefix_salt, self.hasher, num_blocks)
        return request.block_hashes

    def _lookable_blocks(self, request: Request) -> int:
        """Full blocks that may come from the cache: never the one holding the last token, none for a
        request that opted out or still needs the logits of its prompt."""
        if request.params.skip_prefix_cache or request.needs_prompt_logits:
            return 0
        return (request.num_tokens - 1) // self.block_size

    def match_length(self, request: Request) -> int:
        """Tokens of ``request`` a lookup would find cached now (device or offload tier); changes nothing."""
        matched = 0
        for key in self._hashes(request, self._lookable_blocks(request)):
            if self.index.find(key) is None and not (self.offload is not None and self.offload.holds(key)):
                break
            matched += 1
        return matched * self.block_size

    def acquire(self, request: Request) -> int:
        """Give the block-less ``request`` the blocks of its longest cached prefix; return its length in tokens.

        Sets ``block_ids`` and ``num_computed_tokens``; blocks found in the offload tier are copied up
        into fresh device blocks while free blocks last.
        """
        lookable = self._lookable_blocks(request)
        blocks: list[int] = []
        for index, key in enumerate(self._hashes(request, lookable)):
            block_id = self.index.find(key)
            if block_id is not None:
                self.index.pin(block_id)
            else:
                block_id = self._restore(key, request.block_hashes[index - 1] if index else None, index)
                if block_id is None:
                    break
            blocks.append(block_id)
        request.block_ids = blocks
        request.num_computed_tokens = len(blocks) * self.block_size
        self._published[request] = len(blocks)
        return request.num_computed_tokens

    def _restore(self, key: BlockHash, parent: BlockHash | None, depth: int) -> int | None:
        if self.offload is None or not self.offload.holds(key) or self.num_free == 0:
            return None
        block_id = self._take()  # may push a device block down, and the tier may drop ``key`` to fit it
        if not self.offload.load(key, block_id):
            self._free.append(block_id)
            return None
        self.index.add(block_id, key, parent, depth, refs=1)
        return block_id

    def publish(self, request: Request) -> None:
        """Cache ``request``'s computed full blocks under their hashes so later requests find them.

        A block whose hash is already cached (computed twice by concurrent requests) stays private,
        and so does every later block of that request: a cached block's parent is always the block
        before it in the request that holds it.
        """
        done = self._published.get(request, 0)
        full = request.num_computed_tokens // self.block_size
        if request.params.skip_prefix_cache or full <= done:
            return
        hashes = self._hashes(request, full)
        blocks = request.block_ids
        for index in range(done, full):
            if self.index.find(hashes[index]) is not None or (index and blocks[index - 1] not in self.index):
                continue
            self.index.add(blocks[index], hashes[index], hashes[index - 1] if index else None, index, refs=1)
        self._published[request] = full

    def release(self, request: Request) -> None:
        """Publish what ``request`` computed, then drop its references, last block first (the
        scheduler clears its block list): a policy ordering by recency then finds a chain's deepest
        blocks the oldest, as :class:`~pyagent_engine.kvsim.replay.TraceCache` replays it."""
        self.publish(request)
        self._published.pop(request, None)
        self.free(reversed(request.block_ids))


def _policy(registry: Registry, selection: Selection[EvictionSpec], capacity: int, block_size: int) -> EvictionPolicy:
    policy: EvictionPolicy = registry.load(selection.backend)(selection.options, EvictionContext(capacity, block_size))
    return policy


def build_block_pool(config: CacheSettings, num_blocks: int, kv_caches: list[torch.Tensor],
                     registry: Registry) -> tuple[BlockPool, Selection[EvictionSpec] | None]:
    """The engine's block pool for ``config``, and the eviction policy selection when caching is on.

    The policy comes from the registry (``config.eviction``, or the selection precedence); the
    offload tier, when ``config.offload_blocks`` > 0, gets its own instance of the same policy.
    """
    if not config.prefix_caching:
        return BlockPool(num_blocks), None
    hasher = hash_function(config.kv_hash)
    selection = registry.select(EVICTION, config.eviction, config.eviction_options)
    offload = (OffloadTier(kv_caches, _policy(registry, selection, config.offload_blocks, config.block_size))
               if config.offload_blocks else None)
    pool = PrefixCachingBlockPool(num_blocks, config.block_size,
                                  _policy(registry, selection, num_blocks, config.block_size), hasher, offload)
    return pool, selection


class CacheCounters:
    """The prefix-cache figures of each step for the step-stats hook, from a pool's running totals.

    :meth:`take` returns the gauges (``kv_blocks_cached``, ``offload_blocks_used``) as they are and the
    counters (queried and hit tokens, evicted, saved and loaded blocks) as their growth since the previous
    call; nothing for a pool without caching.
    """

    def __init__(self, pool: BlockPool) -> None:
        self.pool = pool
        self._reported: dict[str, int] = {}

    def _totals(self, pool: PrefixCachingBlockPool) -> dict[str, int]:
        totals = {"prefix_cache_queried_tokens": pool.stats.queried_tokens,
                  "prefix_cache_hit_tokens": pool.stats.hit_tokens,
                  "prefix_cache_evicted_blocks": pool.stats.evicted_blocks}
        if pool.offload is not None:
            totals.update(offload_blocks_saved=pool.offload.num_saved, offload_blocks_loaded=pool.offload.num_loaded)
        return totals

    def take(self) -> dict[str, Any]:
        """This step's figures (see the class docstring)."""
        pool = self.pool
        if not isinstance(pool, PrefixCachingBlockPool):
            return {}
        totals = self._totals(pool)
        step = {name: total - self._reported.get(name, 0) for name, total in totals.items()}
        self._reported = totals
        gauges = {"kv_blocks_cached": pool.num_cached}
        if pool.offload is not None:
            gauges["offload_blocks_used"] = len(pool.offload)
        return {**gauges, **step}
