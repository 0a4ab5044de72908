"""Meta-tests of the attention kit: an SDPA-based backend passes it, broken variants fail it."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from pyagent_core.interfaces.attention import AttentionBackend, AttentionMetadata
from pyagent_core.testing.attention import AttentionConformance
from pyagent_core.types import AttentionSpec


class SdpaAttention(AttentionBackend):
    """Writes the cache, gathers whole blocks per sequence and calls torch's SDPA with a bool mask."""

    def forward(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        kv_cache: torch.Tensor,
        metadata: AttentionMetadata,
        layer: int,
    ) -> torch.Tensor:
        self.check_inputs(q, k, v, kv_cache, metadata)
        self.write_cache(k, v, kv_cache, metadata)
        block_size = kv_cache.shape[2]
        starts = metadata.query_start_loc.tolist()
        out = torch.empty_like(q)
        for s, seq_len in enumerate(metadata.seq_lens.tolist()):
            lo, hi = starts[s], starts[s + 1]
            blocks = metadata.block_tables[s, : math.ceil(seq_len / block_size)].long()
            keys, values = (kv_cache[i, blocks].flatten(0, 1)[:seq_len].transpose(0, 1) for i in (0, 1))
            mask = self.mask(metadata, lo, hi, seq_len)
            attended = F.scaled_dot_product_attention(
                q[lo:hi].transpose(0, 1), keys, values, attn_mask=mask, scale=self.scale, enable_gqa=True
            )
            out[lo:hi] = attended.transpose(0, 1)
        return out

    def write_cache(
        self, k: torch.Tensor, v: torch.Tensor, kv_cache: torch.Tensor, md: AttentionMetadata
    ) -> None:
        """Store the new keys and values at their slots."""
        flat = kv_cache.view(2, -1, self.num_kv_heads, self.head_size)
        flat[0, md.slot_mapping] = k
        flat[1, md.slot_mapping] = v

    def mask(self, md: AttentionMetadata, lo: int, hi: int, seq_len: int) -> torch.Tensor:
        """``[query_len, seq_len]`` bool mask: causal, or the tree mask over the new tokens."""
        context = seq_len - (hi - lo)
        mask = torch.ones(hi - lo, seq_len, dtype=torch.bool).tril(diagonal=context)
        if md.tree_mask is not None:
            mask[:, context:] = md.tree_mask[lo:hi, : hi - lo]
        return mask


class NonCausalAttention(SdpaAttention):
    """Broken: every new token sees the whole sequence, future tokens included."""

    def mask(self, md: AttentionMetadata, lo: int, hi: int, seq_len: int) -> torch.Tensor:
        return torch.ones(hi - lo, seq_len, dtype=torch.bool)


class TiledGqaAttention(SdpaAttention):
    """Broken: query head ``h`` reads key/value head ``h % num_kv_heads`` instead of ``h // group``."""

    def forward(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        kv_cache: torch.Tensor,
        metadata: AttentionMetadata,
        layer: int,
    ) -> torch.Tensor:
        group = self.num_heads // self.num_kv_heads
        order = torch.arange(self.num_heads).view(self.num_kv_heads, group).T.flatten()
        return super().forward(q[:, order], k, v, kv_cache, metadata, layer)[:, order.argsort()]


class StaleCacheAttention(SdpaAttention):
    """Broken: attends to the new keys/values but never stores them in the cache."""

    def write_cache(
        self, k: torch.Tensor, v: torch.Tensor, kv_cache: torch.Tensor, md: AttentionMetadata
    ) -> None:
        flat = kv_cache.clone().view(2, -1, self.num_kv_heads, self.head_size)
        flat[0, md.slot_mapping] = k


class UncheckedAttention(SdpaAttention):
    """Broken: skips input validation, so bad shapes fail deep inside torch or not at all."""

    def check_inputs(self, *args: object) -> None:
        pass


SPEC = AttentionSpec(
    name="sdpa-test",
    impl=f"{__name__}:SdpaAttention",
    summary="test-local SDPA attention",
    dtypes=("float32", "bfloat16"),
    tree_mask=True,
)


class TestSdpaAttention(AttentionConformance):
    impl = SdpaAttention
    spec = SPEC


def _kit(impl: type[AttentionBackend]) -> AttentionConformance:
    kit_class = type(f"{impl.__name__}Kit", (AttentionConformance,), {"impl": impl, "spec": SPEC})
    return kit_class()


@pytest.mark.parametrize(
    ("impl", "check"),
    [
        (NonCausalAttention, "test_prefill_odd_lengths"),
        (NonCausalAttention, "test_tree_mask"),
        (TiledGqaAttention, "test_decode_batch"),
        (StaleCacheAttention, "test_decode_single_token"),
        (UncheckedAttention, "test_rejects_mismatched_inputs"),
    ],
)
def test_kit_catches_broken_backend(impl: type[AttentionBackend], check: str) -> None:
    with pytest.raises(AssertionError):
        getattr(_kit(impl), check)()


def test_kit_failure_is_specific() -> None:
    """A non-causal backend is still right where causality cannot matter: single-token decode."""
    _kit(NonCausalAttention).test_decode_single_token()
