"""The KV manager: committing a verified draft tree moves exactly the accepted nodes' keys and values
and frees exactly the blocks past the next position; one budget is shared by per-token and
per-sequence groups."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from pyagent_core.errors import ConfigError
from pyagent_core.interfaces.proposer import ROOT, DraftTree
from pyagent_engine.kv.block_pool import BlockPool
from pyagent_engine.kv.groups import CacheGroup, LayerCache, PagedKVGroup, blocks_in_budget
from pyagent_engine.kv.manager import KVCacheManager
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
    group = PagedKVGroup([0, 1], num_kv_heads=1, head_size=2, dtype=torch.float64)
    num_blocks = 40
    group.allocate(num_blocks, block_size)
    pool = BlockPool(num_blocks)
    kv = KVCacheManager(pool, block_size, [group])
    request = Request("r", list(range(computed + 1)), SamplingParams())
    request.num_computed_tokens = computed  # the last real token sits at position ``computed``
    assert kv.grow(request, num_tokens)
    for layer, cache in enumerate(group.caches):  # every (layer, k/v, slot) holds its own value
        cache.copy_(torch.arange(cache.numel(), dtype=torch.float64).view_as(cache) + 1000 * layer)
    before = [cache.clone() for cache in group.caches]
    blocks = list(request.block_ids)
    request.draft = draft
    kv.commit(request, num_tokens, path)

    first = computed + 1
    assert request.num_computed_tokens == first + len(path)
    keep = min(len(blocks), -(-(first + len(path) + 1) // block_size))  # up to the next position's block
    assert request.block_ids == blocks[:keep]
    assert pool.num_free == num_blocks - keep, "blocks holding only rejected nodes must go back to the pool"

    def at(cache: torch.Tensor, position: int) -> torch.Tensor:
        return cache[:, blocks[position // block_size], position % block_size]

    for cache, old in zip(group.caches, before, strict=True):
        for position in range(first):
            assert torch.equal(at(cache, position), at(old, position))
        for depth, node in enumerate(path):
            assert torch.equal(at(cache, first + depth), at(old, first + node)), f"depth {depth} holds another node"


class PerSequenceState(CacheGroup):
    """A stand-in for a recurrent state: ``size`` float32 values per sequence and layer."""

    def __init__(self, layers: Sequence[int], size: int) -> None:
        super().__init__(layers)
        self.size = size

    def bytes_per_token(self) -> int:
        return 0

    def bytes_per_sequence(self) -> int:
        return 4 * self.size * len(self.layers)

    def _allocate(self, num_blocks: int, block_size: int, num_slots: int,
                  device: torch.device | str) -> list[LayerCache]:
        return [(torch.zeros(num_slots, self.size),) for _ in self.layers]

    def move_tokens(self, src: Sequence[int], dst: Sequence[int]) -> None:
        raise NotImplementedError


def test_one_budget_buys_state_slots_first_then_blocks():
    paged = PagedKVGroup([0, 2], num_kv_heads=2, head_size=4, dtype=torch.float32)  # 2 * 2 * 4 * 4 * 2 = 128 B/token
    state = PerSequenceState([1], size=256)  # 1 KiB per sequence
    assert paged.bytes_per_token() == 128 and state.bytes_per_sequence() == 1024
    budget = 100 * 1024
    assert blocks_in_budget([paged], budget, 16, num_slots=8) == budget // (16 * 128)
    assert blocks_in_budget([paged, state], budget, 16, num_slots=8) == (budget - 8 * 1024) // (16 * 128)
    with pytest.raises(ConfigError, match=r"state slots need .* raise kv_cache_gib or lower max_num_seqs"):
        blocks_in_budget([paged, state], 4 * 1024, 16, num_slots=8)


def test_the_managers_caches_are_every_layer_in_order():
    paged = PagedKVGroup([0, 2], num_kv_heads=1, head_size=2, dtype=torch.float32)
    state = PerSequenceState([1], size=3)
    for group in (paged, state):
        group.allocate(4, 2, num_slots=2)
    kv = KVCacheManager(BlockPool(4), 2, [paged, state])
    assert [type(cache) for cache in kv.caches] == [torch.Tensor, tuple, torch.Tensor]
    assert kv.caches[0] is paged.caches[0] and kv.caches[1] is state.caches[0] and kv.caches[2] is paged.caches[1]
