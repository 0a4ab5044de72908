"""``paged`` rejects inputs that break the cache layout with ValueError, before writing anything."""

from __future__ import annotations

import attrs
import pytest
import torch

from pyagent_attention_paged.backend import PagedAttention
from pyagent_core.testing.attention import Batch, Shape, make_batch


@pytest.fixture
def batch() -> Batch:
    return make_batch(Shape((6, 0), (1, 5)), block_size=4, num_heads=4, num_kv_heads=2, head_size=16,
                      dtype=torch.float32, seed=0)


def test_block_id_out_of_range(batch: Batch) -> None:
    md = batch.metadata
    tables = md.block_tables.clone()
    tables[0, 1] = 10_000
    bad = attrs.evolve(md, block_tables=tables)
    cache = batch.kv_cache.clone()
    with pytest.raises(ValueError, match="block_tables row 0"):
        PagedAttention({"threads": 1}, batch.context()).forward(batch.q, batch.k, batch.v, cache, bad, 0)
    assert torch.equal(cache, batch.kv_cache)


def test_non_contiguous_cache(batch: Batch) -> None:
    cache = batch.kv_cache.transpose(1, 2).contiguous().transpose(1, 2)
    with pytest.raises(ValueError, match="kv_cache must be contiguous"):
        PagedAttention({"threads": 1}, batch.context()).forward(
            batch.q, batch.k, batch.v, cache, batch.metadata, 0
        )


def test_non_contiguous_queries_are_accepted(batch: Batch) -> None:
    backend = PagedAttention({"threads": 1}, batch.context())
    strided = batch.q.transpose(0, 1).contiguous().transpose(0, 1)
    out = backend.forward(strided, batch.k, batch.v, batch.kv_cache.clone(), batch.metadata, 0)
    expected = backend.forward(batch.q, batch.k, batch.v, batch.kv_cache.clone(), batch.metadata, 0)
    assert torch.equal(out, expected)
