"""Meta-tests of the attention kit: the scaffold's SDPA backend passes it, broken variants fail it;
the context a backend is built from refuses head layouts that cannot work."""

from __future__ import annotations

import pytest
import torch

from pyagent_core.interfaces.attention import AttentionBackend, AttentionContext, AttentionMetadata
from pyagent_core.testing.attention import AttentionConformance
from pyagent_core.testing.scaffolded import import_template

reference = import_template("attention")
SdpaAttention = reference.impl.KitReference
# The scaffold's own conformance test, run here on the SDPA backend it scaffolds.
TestSdpaAttention = reference.tests.TestKitReference


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


def _kit(impl: type[AttentionBackend]) -> AttentionConformance:
    return type(f"{impl.__name__}Kit", (TestSdpaAttention,), {"impl": impl})()


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


@pytest.mark.parametrize(("fields", "message"), [
    ({"num_heads": 6, "num_kv_heads": 4}, r"num_heads \(6\) must be a positive multiple of num_kv_heads \(4\)"),
    ({"num_heads": 4, "num_kv_heads": 0}, r"num_heads \(4\) must be a positive multiple of num_kv_heads \(0\)"),
    ({"head_size": 0}, "head_size must be positive, got 0"),
    ({"block_size": -16}, "block_size must be positive, got -16"),
])
def test_context_refuses_impossible_layouts(fields: dict[str, int], message: str) -> None:
    good = {"num_heads": 8, "num_kv_heads": 2, "head_size": 64, "scale": 0.125, "block_size": 16, "dtype": "float32"}
    AttentionContext(**good)
    with pytest.raises(ValueError, match=message):
        AttentionContext(**{**good, **fields})


def test_backend_keeps_options_context_and_head_attributes() -> None:
    context = AttentionContext(num_heads=8, num_kv_heads=2, head_size=64, scale=0.125, block_size=16,
                               dtype="bfloat16")
    backend = SdpaAttention({}, context)
    assert backend.context is context and backend.options == {}
    assert (backend.num_heads, backend.num_kv_heads, backend.head_size, backend.scale) == (8, 2, 64, 0.125)
