"""Cases the kit does not cover: contexts spanning several SDPA key blocks, never reading past a
sequence's end, tree masks on single-token sequences, and a cache that cannot be viewed flat."""

from __future__ import annotations

import attrs
import pytest
import torch

from pyagent_attention_torch_sdpa.backend import TorchSdpaAttention
from pyagent_core.testing.attention import TOLERANCES, Batch, Shape, make_batch, reference_attention

DTYPES = pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
INVARIANT = pytest.mark.parametrize("batch_invariant", [True, False], ids=["invariant", "unpadded"])


def check_against_reference(batch: Batch, batch_invariant: bool = True) -> None:
    """The backend's output and cache agree with the kit's reference on ``batch``."""
    backend = TorchSdpaAttention({"batch_invariant": batch_invariant}, batch.context())
    args = batch.args()
    out = backend.forward(*args)
    expected_out, expected_cache = reference_attention(batch)
    torch.testing.assert_close(args[3], expected_cache, atol=0, rtol=0, equal_nan=True)
    atol, rtol = TOLERANCES[batch.q.dtype]
    torch.testing.assert_close(out.float(), expected_out, atol=atol, rtol=rtol)


def batch_of(shape: Shape, dtype: torch.dtype, *, tree: bool = False, block_size: int = 16) -> Batch:
    """A random batch with SmolLM2's head layout: 9 query heads over 3 key/value heads of 64."""
    return make_batch(shape, block_size=block_size, num_heads=9, num_kv_heads=3, head_size=64,
                      dtype=dtype, seed=3, tree=tree)


@INVARIANT
@DTYPES
@pytest.mark.parametrize("shape", [
    Shape((1500, 530, 511, 0), (1, 1, 1, 1)),
    Shape((1500, 530, 0, 700), (1, 1, 600, 3)),
], ids=["decode", "mixed"])
def test_contexts_over_several_key_blocks_match_the_reference(
    shape: Shape, dtype: torch.dtype, batch_invariant: bool
) -> None:
    check_against_reference(batch_of(shape, dtype), batch_invariant)


@DTYPES
@pytest.mark.parametrize(("shape", "tree"), [
    (Shape((17, 40, 0, 3), (1, 1, 1, 1)), False),
    (Shape((17, 0, 9, 3), (1, 13, 4, 1)), False),
    (Shape((17, 0, 9, 3), (1, 5, 4, 1)), True),
], ids=["decode", "mixed", "tree"])
def test_positions_past_a_sequence_end_are_never_read(shape: Shape, tree: bool, dtype: torch.dtype) -> None:
    batch = batch_of(shape, dtype, tree=tree, block_size=8)
    md = batch.metadata
    cache = batch.kv_cache.clone()
    _, num_blocks, block_size = cache.shape[:3]
    readable = torch.zeros(num_blocks * block_size, dtype=torch.bool)
    for s, seq_len in enumerate(md.seq_lens.tolist()):
        positions = torch.arange(seq_len)
        readable[md.block_tables[s, positions // block_size].long() * block_size + positions % block_size] = True
    cache.view(2, -1, *cache.shape[3:])[:, ~readable] = float("nan")
    check_against_reference(attrs.evolve(batch, kv_cache=cache))


@DTYPES
@pytest.mark.parametrize("shape", [Shape((6, 0, 11), (1, 1, 1)), Shape((6, 4, 11), (1, 3, 1))],
                         ids=["decode", "mixed"])
def test_tree_mask_can_hide_a_single_token_from_itself(shape: Shape, dtype: torch.dtype) -> None:
    batch = batch_of(shape, dtype, tree=True)
    tree_mask = batch.metadata.tree_mask
    assert tree_mask is not None
    hidden = tree_mask.clone()
    hidden[0, 0] = hidden[-1, 0] = False  # first and last sequences: one new token each, with context
    check_against_reference(attrs.evolve(batch, metadata=attrs.evolve(batch.metadata, tree_mask=hidden)))


def test_non_contiguous_cache_is_rejected_before_writing() -> None:
    batch = batch_of(Shape((5,), (1,)), torch.float32)
    strided = batch.kv_cache.transpose(1, 2).contiguous().transpose(1, 2)
    before = strided.clone()
    backend = TorchSdpaAttention({"batch_invariant": True}, batch.context())
    with pytest.raises(ValueError, match="kv_cache must be contiguous"):
        backend.forward(batch.q, batch.k, batch.v, strided, batch.metadata, 0)
    assert torch.equal(strided, before)
