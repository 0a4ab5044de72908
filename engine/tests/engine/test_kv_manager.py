"""The KV manager: committing a verified draft tree moves exactly the accepted nodes' keys and values
(and latent rows) and frees exactly the blocks past the next position; one budget buys the state
slots of a model's recurrent layers first, then blocks for its per-token layers; running requests
hold distinct slots; the offload tier copies whole blocks of keys and values and of latent rows."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from pyagent_core.errors import ConfigError
from pyagent_core.interfaces.cache import CacheLayout, LatentKV, PagedKV, RecurrentState
from pyagent_core.interfaces.eviction import EvictionContext
from pyagent_core.interfaces.proposer import ROOT, DraftTree
from pyagent_core.kinds import EVICTION
from pyagent_core.registry import get_registry
from pyagent_engine.kv.block_pool import BlockPool
from pyagent_engine.kv.layer_caches import CachePlan, LayerCaches, plan_caches
from pyagent_engine.kv.manager import KVCacheManager
from pyagent_engine.kv.offload import OffloadTier
from pyagent_engine.requests.params import SamplingParams
from pyagent_engine.requests.request import Request


@st.composite
def drafts_with_a_path(draw: st.DrawFn) -> tuple[DraftTree, list[int]]:
    """A draft tree (parents before children) and a root-to-node path through it."""
    size = draw(st.integers(1, 9))
    parents = [ROOT]
    for node in range(1, size):
        parents.append(draw(st.integers(ROOT, node - 1)))
    draft = DraftTree([100 + node for node in range(size)], parents)
    path, node = [], ROOT
    while children := [c for c in range(size) if parents[c] == node]:
        if not draw(st.booleans()):
            break
        node = draw(st.sampled_from(children))
        path.append(node)
    return draft, path


@settings(max_examples=80, deadline=None)
@given(case=drafts_with_a_path(), computed=st.integers(1, 20), block_size=st.sampled_from([1, 2, 4, 8]))
def test_commit_keeps_the_accepted_path_at_its_depths_and_frees_the_rest(case, computed, block_size):
    draft, path = case
    num_tokens = 1 + len(draft)  # the last real token, then the nodes
    num_blocks = 40
    layers = LayerCaches(CacheLayout([PagedKV(1, 2), LatentKV(3, 1), PagedKV(1, 2)]), CachePlan(num_blocks, 0, 0),
                         block_size, torch.float64)
    caches = [cache for cache in layers.tensors if isinstance(cache, torch.Tensor)]
    pool = BlockPool(num_blocks)
    kv = KVCacheManager(pool, block_size, layers)
    request = Request("r", list(range(computed + 1)), SamplingParams())
    request.num_computed_tokens = computed  # the last real token sits at position ``computed``
    assert kv.grow(request, num_tokens)
    for layer, cache in enumerate(caches):  # every (layer, k/v, slot) holds its own value
        cache.copy_(torch.arange(cache.numel(), dtype=torch.float64).view_as(cache) + 1000 * layer)
    before = [cache.clone() for cache in caches]
    blocks = list(request.block_ids)
    request.draft = draft
    kv.commit(request, num_tokens, path)

    first = computed + 1
    assert request.num_computed_tokens == first + len(path)
    keep = min(len(blocks), -(-(first + len(path) + 1) // block_size))  # up to the next position's block
    assert request.block_ids == blocks[:keep]
    assert pool.num_free == num_blocks - keep, "blocks holding only rejected nodes must go back to the pool"

    def at(cache: torch.Tensor, position: int) -> torch.Tensor:
        block, offset = blocks[position // block_size], position % block_size
        return cache[:, block, offset] if cache.dim() == 5 else cache[block, offset]  # keys and values, or latent

    for cache, old in zip(caches, before, strict=True):
        for position in range(first):
            assert torch.equal(at(cache, position), at(old, position))
        for depth, node in enumerate(path):
            assert torch.equal(at(cache, first + depth), at(old, first + node)), f"depth {depth} holds another node"


#: Two attention layers around a recurrent one: 2 * (2 * 2 * 4 * 4) = 128 bytes per token (float32),
#: 256 float32 values = 1 KiB per sequence.
HYBRID = CacheLayout([PagedKV(2, 4), RecurrentState("test", ("s",), ((16, 16),)), PagedKV(2, 4)])


def test_one_budget_buys_state_slots_first_then_blocks():
    assert HYBRID.bytes_per_token(4) == 128 and HYBRID.bytes_per_sequence() == 1024
    budget = 100 * 1024
    plan = plan_caches(HYBRID, budget, 16, max_num_seqs=8, itemsize=4, max_model_len=64)
    assert plan == CachePlan((budget - 8 * 1024) // (16 * 128), 8, 8 * 1024 + plan.num_blocks * 16 * 128)
    attention_only = CacheLayout([PagedKV(2, 4), PagedKV(2, 4)])
    assert plan_caches(attention_only, budget, 16, 8, 4, 64) == CachePlan(budget // (16 * 128), 0, budget)
    with pytest.raises(ConfigError, match=r"8 state slots need 8192 bytes .* raise the budget or lower the number "
                                          r"of sequences \(kv_cache_gib, --kv-cache-gib; max_num_seqs"):
        plan_caches(HYBRID, 4 * 1024, 16, 8, 4, 64)
    with pytest.raises(ConfigError, match=r"buys no block of 16 tokens \(2048 bytes\) beside 8 state slots"):
        plan_caches(HYBRID, 9 * 1024, 16, 8, 4, 64)


def test_a_model_without_per_token_layers_pays_for_states_only():
    """Its blocks are bookkeeping: every sequence at the full context, and no tensor."""
    states = CacheLayout([RecurrentState("test", ("s",), ((16, 16),))] * 2)
    plan = plan_caches(states, 100 * 1024, 16, max_num_seqs=8, itemsize=4, max_model_len=100)
    assert plan == CachePlan(8 * 7, 8, 8 * 2048)
    layers = LayerCaches(states, plan, 16, torch.float32)
    assert [tuple(t.shape) for cache in layers.tensors for t in cache] == [(8, 16, 16)] * 2
    assert layers.by_block() == []


def test_the_managers_caches_are_every_layer_in_order_and_requests_hold_distinct_slots():
    layers = LayerCaches(HYBRID, CachePlan(4, 2, 0), 2, torch.float32)
    kv = KVCacheManager(BlockPool(4), 2, layers, num_slots=2)
    assert [type(cache) for cache in kv.caches] == [torch.Tensor, tuple, torch.Tensor]
    assert kv.caches[1][0].shape == (2, 16, 16) and kv.caches[1][0].dtype == torch.float32
    first, second, third = (Request(str(i), [1, 2], SamplingParams()) for i in range(3))
    kv.acquire(first)
    kv.acquire(second)
    assert {kv.state_slot(first), kv.state_slot(second)} == {0, 1} and kv.num_free_slots == 0
    with pytest.raises(ConfigError, match="all 2 state slots are held"):
        kv.acquire(third)
    slot = kv.state_slot(first)
    kv.release(first)
    kv.acquire(third)
    assert kv.state_slot(third) == slot and kv.num_free_slots == 0


def test_the_offload_tier_copies_whole_blocks_of_keys_values_and_latent_rows():
    layers = LayerCaches(CacheLayout([PagedKV(1, 2), LatentKV(3, 1)]), CachePlan(6, 0, 0), 4, torch.float64)
    for cache in layers.by_block():
        cache.copy_(torch.randn(cache.shape, dtype=torch.float64))
    original = [cache[3].clone() for cache in layers.by_block()]
    lru = get_registry().select(EVICTION, "lru")
    tier = OffloadTier(layers.by_block(), get_registry().load(lru.backend)({}, EvictionContext(2, 4)))
    tier.save(b"k", None, 0, 3)
    for cache in layers.by_block():
        cache[3] = 0
    assert tier.load(b"k", 5)
    for cache, block in zip(layers.by_block(), original, strict=True):
        assert torch.equal(cache[5], block) and not cache[3].any()
