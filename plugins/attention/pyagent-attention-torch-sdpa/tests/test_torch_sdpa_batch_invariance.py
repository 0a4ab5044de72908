"""A decode step's output for one sequence is the same bits alone as batched with 15 others.

The batch mixes short and long sequences (up to three of the CPU SDPA kernel's 512-key blocks). This
held on AVX-512 hosts with padded batched calls and failed on an AVX2-only host; the backend now
gives each decode sequence its own call, which this checks on every host.
"""

from __future__ import annotations

import itertools

import attrs
import pytest
import torch

from pyagent_attention_torch_sdpa.backend import TorchSdpaAttention
from pyagent_core.interfaces.attention import AttentionMetadata
from pyagent_core.testing.attention import TOLERANCES, Batch, Shape, make_batch, reference_attention

DECODE_CONTEXTS = (0, 3, 15, 16, 47, 200, 255, 300, 383, 511, 512, 700, 1023, 1100, 1400, 1535)
PREFILL_CONTEXTS = (0, 20)


def select(batch: Batch, seqs: list[int]) -> Batch:
    """The sub-batch of sequences ``seqs`` of ``batch``, over the same cache."""
    md = batch.metadata
    starts = md.query_start_loc.tolist()
    tokens = torch.cat([torch.arange(starts[s], starts[s + 1]) for s in seqs])
    rows = torch.tensor(seqs)
    query_lens = [starts[s + 1] - starts[s] for s in seqs]
    seq_lens = md.seq_lens[rows]
    metadata = AttentionMetadata(
        block_tables=md.block_tables[rows],
        slot_mapping=md.slot_mapping[tokens],
        seq_lens=seq_lens,
        query_start_loc=torch.tensor([0, *itertools.accumulate(query_lens)], dtype=torch.int32),
        max_query_len=max(query_lens),
        max_seq_len=int(seq_lens.max()),
    )
    return attrs.evolve(batch, q=batch.q[tokens], k=batch.k[tokens], v=batch.v[tokens], metadata=metadata)


def run(backend: TorchSdpaAttention, batch: Batch) -> torch.Tensor:
    """The backend's output on ``batch`` (over a fresh copy of its cache)."""
    return backend.forward(*batch.args())


@pytest.mark.parametrize("block_size", [16, 5])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_decode_output_does_not_depend_on_the_batch(dtype: torch.dtype, block_size: int) -> None:
    decode = len(DECODE_CONTEXTS)
    shape = Shape(DECODE_CONTEXTS + PREFILL_CONTEXTS, (1,) * decode + (7, 12))
    batch = make_batch(shape, block_size=block_size, num_heads=9, num_kv_heads=3, head_size=64,
                       dtype=dtype, seed=7)
    backend = TorchSdpaAttention({"batch_invariant": True}, batch.context())
    decode_only = run(backend, select(batch, list(range(decode))))
    mixed = run(backend, batch)
    expected, _ = reference_attention(batch)
    atol, rtol = TOLERANCES[dtype]
    torch.testing.assert_close(mixed.float(), expected, atol=atol, rtol=rtol)
    for s in range(decode):
        alone = run(backend, select(batch, [s]))[0]
        label = f"sequence {s} (context {DECODE_CONTEXTS[s]}, {dtype}, block size {block_size})"
        assert torch.equal(alone, decode_only[s]), f"{label}: alone differs from the 16-sequence decode batch"
        assert torch.equal(alone, mixed[s]), f"{label}: alone differs from a batch with prefills"
