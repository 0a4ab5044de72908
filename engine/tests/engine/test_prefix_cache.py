"""Prefix caching without the model: block hashes, the pool's invariants, offload, salts, scheduling.

The model is replaced by a simulation that writes, for every computed position, a fingerprint of
the whole token prefix up to it into a real KV tensor, and draws each next token from the
fingerprint it reads back at the last position. A stale or overwritten cached block therefore shows
up as a wrong fingerprint (checked before every chunk) and as different outputs; hypothesis drives
random shared-prefix workloads through tiny pools, so evictions, offloads and preemptions happen.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Mapping
from typing import Any

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from pyagent_core.errors import ConfigError, EvictionError, RequestError
from pyagent_core.interfaces.eviction import EvictionContext, EvictionPolicy
from pyagent_core.interfaces.scheduler import SchedulerContext
from pyagent_core.kinds import EVICTION
from pyagent_core.registry import get_registry
from pyagent_engine.core.config import EngineConfig
from pyagent_engine.kv.block_hash import HASH_NAMES, extend_block_hashes, hash_function
from pyagent_engine.kv.block_pool import BlockPool
from pyagent_engine.kv.manager import KVCacheManager
from pyagent_engine.kv.offload import OffloadTier
from pyagent_engine.kv.prefix_cache import PrefixCachingBlockPool
from pyagent_engine.kv.prefix_index import CacheEntry, PrefixIndex
from pyagent_engine.requests.params import SamplingParams
from pyagent_engine.requests.request import Request
from pyagent_engine.scheduling.policy import GuardedPolicy, build_scheduling_policy
from pyagent_engine.scheduling.scheduler import Scheduler

MOD = 2**50  # fingerprints stay exact in float64


class Lru(EvictionPolicy):
    """A small LRU for these tests (insertion-ordered dict: oldest first)."""

    def __init__(self, options: Mapping[str, Any], context: EvictionContext) -> None:
        super().__init__(options, context)
        self.order: dict[int, None] = {}

    def insert(self, block_id: int) -> None:
        self.check_insert(block_id)
        self.order[block_id] = None

    def touch(self, block_id: int) -> None:
        self.check_present(block_id)
        self.order[block_id] = self.order.pop(block_id)

    def remove(self, block_id: int) -> None:
        self.check_present(block_id)
        del self.order[block_id]

    def evict(self) -> int:
        self.check_not_empty()
        victim = next(iter(self.order))
        del self.order[victim]
        return victim

    def __len__(self) -> int:
        return len(self.order)

    def __contains__(self, block_id: object) -> bool:
        return block_id in self.order


def check_victims(index: PrefixIndex) -> None:
    """Make ``index`` assert, at every eviction, that the victim is an unused leaf."""
    evict = index.evict

    def checked() -> tuple[int, CacheEntry]:
        victim, entry = evict()
        assert entry.refs == 0, f"evicted block {victim} while {entry.refs} requests use it"
        assert index.num_children(entry.key) == 0, f"evicted block {victim} before its children"
        return victim, entry

    index.evict = checked  # type: ignore[method-assign]


def make_pool(num_blocks: int, block_size: int, offload: int = 0, policy: type[EvictionPolicy] = Lru,
              options: Mapping[str, Any] | None = None):
    """A checked prefix-caching pool over a one-layer float64 'KV cache' of fingerprints."""
    caches = [torch.zeros((2, num_blocks, block_size, 1, 1), dtype=torch.float64)]
    options = options or {}
    by_block = [caches[0].transpose(0, 1)]  # the tier copies block-major views
    tier = OffloadTier(by_block, policy(options, EvictionContext(offload, block_size))) if offload else None
    pool = PrefixCachingBlockPool(num_blocks, block_size, policy(options, EvictionContext(num_blocks, block_size)),
                                  hash_function("sha256"), tier)
    check_victims(pool.index)
    if tier is not None:
        check_victims(tier.index)
    return pool, caches[0]


def fingerprints(tokens: list[int]) -> list[int]:
    """A rolling hash of every prefix of ``tokens``: what the KV at each position depends on."""
    out, value = [], 0
    for token in tokens:
        value = (value * 1_000_003 + token + 1) % MOD
        out.append(value)
    return out


class Simulation:
    """Drives a scheduler as the engine does, with a fingerprint 'model' writing into ``kv``."""

    def __init__(self, scheduler: Scheduler, kv: torch.Tensor) -> None:
        self.scheduler = scheduler
        self.kv = kv
        self.bs = scheduler.kv.block_size
        self.cached_tokens = 0
        self.preemptions = 0

    def slot(self, request: Request, pos: int) -> tuple[int, int]:
        return request.block_ids[pos // self.bs], pos % self.bs

    def run(self, requests: list[Request], max_steps: int = 5000) -> None:
        for request in requests:
            self.scheduler.add(request)
        steps = 0
        while self.scheduler.has_work():
            steps += 1
            assert steps < max_steps, "no progress"
            plan = self.scheduler.schedule()
            assert plan.chunks, "a step scheduled nothing while work remained"
            self.cached_tokens += plan.num_cached_tokens
            self.preemptions += len(plan.preempted)
            for chunk in plan.chunks:
                self.compute(chunk.request, chunk.num_tokens, chunk.sample)
            check_pool(self.scheduler)

    def compute(self, request: Request, count: int, sample: bool) -> None:
        start = request.num_computed_tokens
        assert count > 0 and start + count <= request.num_tokens, f"bad chunk: {start}+{count}"
        prints = fingerprints(request.token_ids(0, start + count))
        for pos in range(start):
            block, offset = self.slot(request, pos)
            assert self.kv[0, block, offset, 0, 0].item() == prints[pos], (
                f"{request.request_id}: cached KV at position {pos} is stale")
        for pos in range(start, start + count):
            block, offset = self.slot(request, pos)
            self.kv[0, block, offset, 0, 0] = prints[pos]
        request.num_computed_tokens += count
        if sample:
            block, offset = self.slot(request, start + count - 1)
            request.output_token_ids.append(int(self.kv[0, block, offset, 0, 0].item()) % 7)
            if len(request.output_token_ids) == request.params.max_tokens:
                self.scheduler.finish(request)


def check_pool(scheduler: Scheduler) -> None:
    """Reference counts equal the running requests holding each block, the parent of a used block is
    used, and free, cached and held blocks add up."""
    pool = scheduler.kv.prefix_cache
    assert pool is not None
    holders: dict[int, int] = {}
    for request in scheduler.running:
        for block_id in request.block_ids:
            holders[block_id] = holders.get(block_id, 0) + 1
    free = set(pool._free)
    assert len(free) == len(pool._free), "a block is on the free list twice"
    assert not free & set(holders), "a held block is on the free list"
    for block_id in range(pool.num_blocks):
        cached = block_id in pool.index
        refs = pool.index.entry(block_id).refs if cached else 0
        if cached:
            assert refs == holders.get(block_id, 0) >= 0, f"block {block_id}: refs {refs}, holders {holders}"
            parent = pool.index.entry(block_id).parent
            if refs and parent is not None:  # else an unused parent could not be evicted before its child
                parent_id = pool.index.find(parent)
                assert parent_id is not None and pool.index.entry(parent_id).refs, "a used block's parent is unused"
            assert pool.index.is_evictable(block_id) == (refs == 0)
        else:
            assert holders.get(block_id, 0) <= 1, f"uncached block {block_id} is shared"
            assert (block_id in free) != (block_id in holders), f"block {block_id} is lost or double-booked"
    unused_cached = sum(1 for b in range(pool.num_blocks) if b in pool.index and not holders.get(b))
    assert pool.num_free == len(free) + unused_cached


def make_request(index: int, tokens: list[int], max_tokens: int, salt: str | None = None,
                 skip: bool = False) -> Request:
    return Request(f"r{index}", list(tokens),
                   SamplingParams(max_tokens=max_tokens, cache_salt=salt, skip_prefix_cache=skip))


def reference_outputs(workload: list[tuple[list[int], int]]) -> list[list[int]]:
    """Outputs with a plain pool big enough for everything (no cache, no preemption)."""
    bs = 4
    total = sum(-(-(len(t) + n) // bs) for t, n in workload)
    kv = torch.zeros((2, total, bs, 1, 1), dtype=torch.float64)
    scheduler = Scheduler(KVCacheManager(BlockPool(total), bs), 64, 512)
    requests = [make_request(i, t, n) for i, (t, n) in enumerate(workload)]
    for request in requests:
        scheduler.add(request)
    while scheduler.has_work():
        for chunk in scheduler.schedule().chunks:
            Simulation(scheduler, kv).compute(chunk.request, chunk.num_tokens, chunk.sample)
    return [r.output_token_ids for r in requests]


prefixes = st.lists(st.integers(0, 5), min_size=0, max_size=14)
workloads = st.lists(
    st.tuples(st.integers(0, 2), st.lists(st.integers(0, 5), min_size=1, max_size=10), st.integers(1, 6),
              st.sampled_from([None, "tenant"]), st.booleans()),
    min_size=1, max_size=10,
)


shared_prefix_cases = dict(
    bases=st.lists(prefixes, min_size=3, max_size=3), workload=workloads, spare=st.integers(0, 6),
    offload=st.sampled_from([0, 3, 12]), budget=st.integers(4, 24), max_seqs=st.integers(1, 4),
    schedule=st.sampled_from(["fcfs", "lpm"]), waves=st.integers(1, 2),
)


def scheduling(name: str) -> GuardedPolicy:
    """The registry's scheduling policy ``name``, as the engine builds it."""
    return build_scheduling_policy(get_registry(), name, {}, SchedulerContext(64, 4, 4, 64), prefix_caching=True)[0]


def check_against_reference(policy: type[EvictionPolicy], options: Mapping[str, Any], bases, workload, spare,
                            offload, budget, max_seqs, schedule, waves) -> None:
    """Run ``workload`` (``waves`` times) through a tight prefix-caching pool; outputs must match the reference."""
    items = [(bases[b] + suffix, n, salt, skip and index % 3 == 0)
             for index, (b, suffix, n, salt, skip) in enumerate(workload)]
    expected = reference_outputs([(t, n) for t, n, _, _ in items])
    largest = max(-(-(len(t) + n) // 4) for t, n, _, _ in items)
    pool, kv = make_pool(largest + spare, 4, offload, policy, options)
    scheduler = Scheduler(KVCacheManager(pool, 4), max_seqs, max(budget, max_seqs), scheduling(schedule))
    simulation = Simulation(scheduler, kv)
    for wave in range(waves):  # a second wave re-runs the same prompts against a warm cache
        requests = [make_request(i + 100 * wave, t, n, salt, skip) for i, (t, n, salt, skip) in enumerate(items)]
        simulation.run(requests)
        assert [r.output_token_ids for r in requests] == expected
    assert pool.num_free == pool.num_blocks, "blocks leaked"


@settings(max_examples=60, deadline=None)
@given(**shared_prefix_cases)
def test_random_shared_prefix_workloads_match_the_uncached_reference(**case):
    check_against_reference(Lru, {}, **case)


@pytest.mark.parametrize("name", [b.name for b in get_registry().available(EVICTION)])
def test_every_installed_policy_drives_the_pool_correctly(name):
    registry = get_registry()
    selection = registry.select(EVICTION, name)
    policy = registry.load(selection.backend)

    @settings(max_examples=15, deadline=None)
    @given(**shared_prefix_cases)
    def run(**case):
        check_against_reference(policy, selection.options, **case)

    run()


def test_a_hit_skips_the_cached_blocks_but_recomputes_the_last_token():
    pool, kv = make_pool(16, 4)
    simulation = Simulation(Scheduler(KVCacheManager(pool, 4), 4, 64), kv)
    first = make_request(0, list(range(12)), 2)
    simulation.run([first])
    same = make_request(1, list(range(12)), 2)
    longer = make_request(2, [*range(12), 9, 9], 1)
    scheduler = simulation.scheduler
    scheduler.add(same)
    scheduler.add(longer)
    plan = scheduler.schedule()
    # 12 tokens = 3 full blocks, but the last token must be computed: 2 blocks (8 tokens) come from the cache.
    assert [(c.request, c.num_tokens) for c in plan.chunks] == [(same, 4), (longer, 2)]
    assert same.num_cached_tokens == 8 and longer.num_cached_tokens == 12 and plan.num_cached_tokens == 20
    assert same.block_ids[:2] == longer.block_ids[:2] and same.block_ids[2] != longer.block_ids[2]


def test_cache_salt_isolates_and_skip_switch_bypasses():
    pool, kv = make_pool(32, 4)
    simulation = Simulation(Scheduler(KVCacheManager(pool, 4), 1, 64), kv)
    tokens = list(range(13))
    requests = [make_request(0, tokens, 1, salt="a"), make_request(1, tokens, 1, salt="b"),
                make_request(2, tokens, 1, salt="a"), make_request(3, tokens, 1),
                make_request(4, tokens, 1, skip=True), make_request(5, tokens, 1)]
    simulation.run(requests)
    assert [r.num_cached_tokens for r in requests] == [0, 0, 12, 0, 0, 12]
    assert len({r.output_token_ids[0] for r in requests}) == 1
    skipped = make_request(6, [*tokens, 1, 2, 3, 4], 1, skip=True)
    before = pool.num_cached
    simulation.run([skipped])
    assert pool.num_cached == before, "a skip-cache request published blocks"


def test_eviction_takes_leaves_first_and_never_blocks_in_use():
    pool, kv = make_pool(6, 2)
    simulation = Simulation(Scheduler(KVCacheManager(pool, 2), 1, 64), kv)
    simulation.run([make_request(0, [1, 2, 3, 4, 5, 6, 7], 1)])  # blocks [1,2] [3,4] [5,6] cached, chained
    chain = [pool.index.find(h) for h in pool_hashes(pool, [1, 2, 3, 4, 5, 6])]
    assert None not in chain
    # All unused; given back last block first, so the deepest is the oldest.
    assert list(pool.index.policy.order) == [pool.index.entry(b).policy_id for b in reversed(chain)]
    holder = make_request(1, [1, 2, 9, 9, 9], 1)  # takes block [1,2]; needs 2 more
    scheduler = simulation.scheduler
    scheduler.add(holder)
    scheduler.schedule()
    assert holder.block_ids[0] == chain[0] and pool.index.entry(chain[0]).refs == 1
    # The free block; then LRU names [5,6], a leaf, and [3,4], a leaf by then. Never [1,2].
    assert pool.allocate(3) is not None
    assert chain[0] in pool.index and chain[1] not in pool.index and chain[2] not in pool.index
    assert pool.allocate(1) is None


class RememberingLru(Lru):
    """The test LRU, declaring a ghost history (it keeps none: the index's side is under test)."""

    def __init__(self, options: Mapping[str, Any], context: EvictionContext) -> None:
        super().__init__(options, context)
        self.history = 2
        self.forgotten: list[int] = []

    def forget(self, block_id: int) -> None:
        super().forget(block_id)
        self.forgotten.append(block_id)


def test_index_parks_a_named_parent_until_its_children_go():
    index = PrefixIndex(Lru({}, EvictionContext(4, 2)), block_size=2)
    for depth, key in enumerate([b"a", b"ab", b"abc"]):  # unused at once, root first: LRU names the root first
        index.add(10 + depth, key, key[:-1] or None, depth, refs=0)
    assert [index.evict()[0] for _ in range(3)] == [12, 11, 10]  # the root and its child parked, then ready


def test_a_dropped_content_keeps_its_policy_id_for_the_policy_history():
    policy = RememberingLru({}, EvictionContext(2, 2))
    index = PrefixIndex(policy, block_size=2)
    assert index.history == policy.history + policy.capacity
    index.add(0, b"a", None, 0, refs=0)
    first = index.entry(0).policy_id
    index.evict()
    index.add(1, b"a", None, 0, refs=0)  # the same content in another block: the policy knows its id
    assert index.entry(1).policy_id == first and not policy.forgotten
    for key in (b"b", b"c", b"d", b"e", b"f"):  # five drops from b"a" on: history + capacity is 4
        index.evict()
        index.add(1, key, None, 0, refs=0)
    assert policy.forgotten == [first]  # b"a" fell out of the index's memory; its id is spare
    index.evict()
    index.add(2, b"a", None, 0, refs=0)
    assert index.entry(2).policy_id in policy.forgotten  # a new content to the policy


def test_without_history_every_dropped_id_is_forgotten():
    policy = RememberingLru({}, EvictionContext(2, 2))
    policy.history = 0
    index = PrefixIndex(policy, block_size=2)
    index.add(0, b"a", None, 0, refs=0)
    index.evict()
    assert index.history == 0 and policy.forgotten == [0]


def test_blocks_computed_twice_at_once_stay_private_with_everything_after_them():
    pool, kv = make_pool(16, 2)
    simulation = Simulation(Scheduler(KVCacheManager(pool, 2), 2, 64), kv)
    short = make_request(0, [1, 2, 3], 1)
    long = make_request(1, [1, 2, 5, 6, 7, 8, 9], 6)
    simulation.run([short, long])  # both compute [1,2] in the same step; the check runs after every step
    first = pool.index.find(pool_hashes(pool, [1, 2])[0])
    assert first is not None and pool.index.num_children(pool.index.entry(first).key) == 0
    again = make_request(2, [1, 2, 5, 6, 7, 8, 9], 1)
    simulation.run([again])
    assert again.num_cached_tokens == 2, "only [1,2] is cached: the long request's later blocks stayed private"


def pool_hashes(pool: PrefixCachingBlockPool, tokens: list[int]) -> list:
    hashes: list = []
    extend_block_hashes(hashes, lambda a, b: tokens[a:b], pool.block_size, None, pool.hasher,
                        len(tokens) // pool.block_size)
    return hashes


def test_offload_round_trip_restores_instead_of_recomputing():
    pool, kv = make_pool(5, 4, offload=8)
    simulation = Simulation(Scheduler(KVCacheManager(pool, 4), 1, 64), kv)
    first = make_request(0, list(range(13)), 1)
    simulation.run([first])
    simulation.run([make_request(1, [7] * 17, 1)])  # needs all 5 blocks: first's 3 cached blocks go down
    assert pool.offload is not None and len(pool.offload) == 3 and pool.num_cached == 4
    again = make_request(2, list(range(13)), 1)
    simulation.run([again])  # the fingerprint checks prove the restored KV is the original
    assert again.num_cached_tokens == 12 and pool.offload.num_loaded == 3
    assert again.output_token_ids == first.output_token_ids


def test_lpm_admits_the_longest_cached_prefix_first():
    pool, kv = make_pool(32, 4)
    scheduler = Scheduler(KVCacheManager(pool, 4), 1, 64, scheduling("lpm"))
    simulation = Simulation(scheduler, kv)
    simulation.run([make_request(0, list(range(16)), 1)])
    cold = make_request(1, [5] * 16, 1)
    warm = make_request(2, [*range(16), 3], 1)
    scheduler.add(cold)
    scheduler.add(warm)
    assert scheduler.schedule().chunks[0].request is warm
    fcfs = Scheduler(KVCacheManager(make_pool(32, 4)[0], 4), 1, 64)
    fcfs.add(cold)
    assert fcfs.schedule().chunks[0].request is cold


@pytest.mark.parametrize("name", HASH_NAMES)
def test_block_hashes_chain_over_the_prefix_and_the_salt(name):
    hasher = hash_function(name)

    def hashes(tokens, salt=None):
        out: list = []
        extend_block_hashes(out, lambda a, b: tokens[a:b], 2, salt, hasher, len(tokens) // 2)
        return out

    base = hashes([1, 2, 3, 4, 5, 6])
    assert base == hashes([1, 2, 3, 4, 5, 6, 7]) and len(set(base)) == 3
    other = hashes([9, 2, 3, 4, 5, 6])  # same later blocks, different first block: every hash differs
    assert not set(base) & set(other)
    salted = hashes([1, 2, 3, 4, 5, 6], salt="t1")
    assert not set(base) & set(salted) and salted == hashes([1, 2, 3, 4, 5, 6], salt="t1")
    assert not set(salted) & set(hashes([1, 2, 3, 4, 5, 6], salt="t2"))


def test_bad_hash_names_and_missing_xxhash_are_clear(monkeypatch):
    with pytest.raises(ConfigError, match="choose one of: sha256, xxhash, builtin"):
        hash_function("md5")
    monkeypatch.setitem(sys.modules, "xxhash", None)
    with pytest.raises(ConfigError, match="pip install xxhash "):
        hash_function("xxhash")


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"offload_blocks": 8}, "an offload tier needs prefix caching"),
        ({"prefix_caching": True, "offload_blocks": -1}, "offload_blocks must be an integer >= 0"),
        ({"prefix_caching": True, "kv_hash": "md5"}, "unknown kv hash 'md5'"),
    ],
)
def test_bad_cache_configs_are_rejected(fields, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        EngineConfig(**fields)


def test_bad_request_cache_params_are_rejected():
    with pytest.raises(RequestError, match="cache_salt must be a non-empty string"):
        SamplingParams(cache_salt="")
    with pytest.raises(RequestError, match="skip_prefix_cache must be True or False"):
        SamplingParams(skip_prefix_cache=1)


def test_releasing_a_block_twice_raises():
    pool, _ = make_pool(4, 2)
    request = make_request(0, [1, 2, 3], 1)
    request.block_ids = pool.allocate(2)
    request.num_computed_tokens = 2
    pool.publish(request)
    pool.free(request.block_ids[:1])
    with pytest.raises(EvictionError, match="released more often"):
        pool.free(request.block_ids[:1])
