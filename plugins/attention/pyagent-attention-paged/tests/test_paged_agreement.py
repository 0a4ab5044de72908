"""``paged`` forward (C kernel) against pyagent-kernels' torch fallback on random batches."""

from __future__ import annotations

import attrs
import pytest
import torch

import pyagent_kernels
from pyagent_attention_paged.backend import PagedAttention
from pyagent_core.testing.attention import TOLERANCES, Shape, make_batch
from pyagent_kernels.attention import paged_attention

pytestmark = pytest.mark.skipif(not pyagent_kernels.status()["compiled"], reason="pyagent_kernels._C is not built")


def random_shape(gen: torch.Generator, block_size: int) -> Shape:
    """1 to 5 sequences: decodes, odd prefills, chunks after context, block-boundary lengths."""
    num_seqs = int(torch.randint(1, 6, (1,), generator=gen))
    contexts, queries = [], []
    for _ in range(num_seqs):
        kind = int(torch.randint(0, 4, (1,), generator=gen))
        context = [0, block_size, 1 + int(torch.randint(0, 20 * block_size, (1,), generator=gen)),
                   int(torch.randint(0, 3 * block_size, (1,), generator=gen))][kind]
        query = [1, block_size, int(torch.randint(1, 40, (1,), generator=gen)), 1][kind]
        contexts.append(context)
        queries.append(query)
    return Shape(tuple(contexts), tuple(queries))


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_forward_matches_torch_fallback(seed: int, dtype: torch.dtype) -> None:
    gen = torch.Generator().manual_seed(seed)
    block_size = [1, 3, 16, 32][seed % 4]
    kv_heads = 1 + seed % 3
    num_heads = kv_heads * [1, 3, 4][seed % 3]
    head_size = [64, 24, 128][seed % 3]
    batch = make_batch(random_shape(gen, block_size), block_size=block_size, num_heads=num_heads,
                       num_kv_heads=kv_heads, head_size=head_size, dtype=dtype, seed=seed, tree=seed % 2 == 1)
    md = batch.metadata
    backend = PagedAttention({"threads": 1 + seed % 2}, batch.context())
    cache = batch.kv_cache.clone()
    out = backend.forward(batch.q, batch.k, batch.v, cache, md, 0)
    expected_cache = batch.kv_cache.clone()
    expected = paged_attention(
        batch.q, batch.k, batch.v, expected_cache, block_tables=md.block_tables, slot_mapping=md.slot_mapping,
        seq_lens=md.seq_lens, query_start_loc=md.query_start_loc, scale=batch.scale, tree_mask=md.tree_mask,
        backend="torch",
    )
    assert torch.equal(cache, expected_cache)
    atol, rtol = TOLERANCES[dtype]
    torch.testing.assert_close(out.float(), expected.float(), atol=atol, rtol=rtol)


def test_one_token_alone_or_batched_is_bitwise_equal() -> None:
    batch = make_batch(Shape((77, 5, 300), (1, 9, 1)), block_size=16, num_heads=9, num_kv_heads=3,
                       head_size=64, dtype=torch.bfloat16, seed=5)
    md = batch.metadata
    backend = PagedAttention({"threads": 1}, batch.context())
    batched = backend.forward(batch.q, batch.k, batch.v, batch.kv_cache.clone(), md, 0)
    single = attrs.evolve(md, block_tables=md.block_tables[:1], slot_mapping=md.slot_mapping[:1],
                          seq_lens=md.seq_lens[:1], query_start_loc=md.query_start_loc[:2],
                          max_query_len=1, max_seq_len=int(md.seq_lens[0]))
    out = backend.forward(batch.q[:1], batch.k[:1], batch.v[:1], batch.kv_cache.clone(), single, 0)
    assert torch.equal(out[0], batched[0])
