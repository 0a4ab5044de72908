"""Meta-tests of the attention kit: the scaffold's SDPA backend passes it, broken variants fail it
(windows ignored, off by one, taken from the wrong layer or counted in cache positions under a
tree; scores left uncapped); the kit's window is transformers'; the context a backend is built from
refuses head layouts, windows and caps that cannot work; ``cache_slots`` addresses the cache as its
``[2, num_blocks, block_size, ...]`` layout does."""

from __future__ import annotations

import attrs
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from pyagent_core.interfaces.attention import (
    AttentionBackend,
    AttentionContext,
    AttentionMetadata,
    cache_slots,
    visible_mask,
)
from pyagent_core.testing.attention import AttentionConformance, Shape, make_batch, visible_positions
from pyagent_core.testing.scaffolded import import_template

reference = import_template("attention")
SdpaAttention = reference.impl.KitReference
# The scaffold's own conformance test, run here on the SDPA backend it scaffolds.
TestSdpaAttention = reference.tests.TestKitReference


class NonCausalAttention(SdpaAttention):
    """Broken: every new token sees the whole sequence, future tokens included."""

    def mask(self, md: AttentionMetadata, lo: int, hi: int, seq_len: int, window: int | None) -> torch.Tensor:
        return torch.ones(hi - lo, seq_len, dtype=torch.bool)


class WindowlessAttention(SdpaAttention):
    """Broken: ignores the sliding window (every earlier position stays visible)."""

    def mask(self, md: AttentionMetadata, lo: int, hi: int, seq_len: int, window: int | None) -> torch.Tensor:
        return super().mask(md, lo, hi, seq_len, None)


class WiderWindowAttention(SdpaAttention):
    """Broken: off by one, a window of ``w`` sees ``w + 1`` positions (``j >= p - w``)."""

    def mask(self, md: AttentionMetadata, lo: int, hi: int, seq_len: int, window: int | None) -> torch.Tensor:
        return super().mask(md, lo, hi, seq_len, None if window is None else window + 1)


class FirstLayerWindowAttention(SdpaAttention):
    """Broken: every layer attends with layer 0's window."""

    def __init__(self, options: dict[str, object], context: AttentionContext) -> None:
        windows = context.sliding_windows
        super().__init__(options, attrs.evolve(context, sliding_windows=windows[:1] * len(windows)))


class CachePositionWindowAttention(SdpaAttention):
    """Broken: under a tree mask, measures the window in cache positions, not positions in the text."""

    def mask(self, md: AttentionMetadata, lo: int, hi: int, seq_len: int, window: int | None) -> torch.Tensor:
        mask = super().mask(md, lo, hi, seq_len, None)
        if window is not None:
            positions = torch.arange(seq_len)
            mask &= positions > (torch.arange(seq_len - (hi - lo), seq_len) - window).unsqueeze(1)
        return mask


class UncappedAttention(SdpaAttention):
    """Broken: ignores the score cap."""

    def attend(self, q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.scaled_dot_product_attention(q, keys, values, attn_mask=mask, scale=self.scale,
                                                                enable_gqa=True)


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
        (WindowlessAttention, "test_sliding_window_decode"),
        (WindowlessAttention, "test_sliding_window_prefill"),
        (WindowlessAttention, "test_sliding_window_prefix_hit"),
        (WindowlessAttention, "test_sliding_window_mixed"),
        (WiderWindowAttention, "test_sliding_window_prefix_hit"),
        (FirstLayerWindowAttention, "test_sliding_window_per_layer"),
        (CachePositionWindowAttention, "test_sliding_window_tree"),
        (UncappedAttention, "test_soft_cap"),
        (UncappedAttention, "test_soft_cap_with_window_and_tree"),
    ],
)
def test_kit_catches_broken_backend(impl: type[AttentionBackend], check: str) -> None:
    with pytest.raises(AssertionError):
        getattr(_kit(impl), check)()


def test_kit_failure_is_specific() -> None:
    """A non-causal backend is still right where causality cannot matter: single-token decode; one
    that ignores windows is right for models without any."""
    _kit(NonCausalAttention).test_decode_single_token()
    _kit(WindowlessAttention).test_mixed_prefill_and_decode()


@pytest.mark.parametrize("window", [1, 3, 8])
def test_the_kits_window_is_transformers_sliding_window(window: int) -> None:
    """The kit's visible positions of a prefill after cached context are transformers' sliding-window
    causal mask (``masking_utils.sliding_window_causal_mask_function``) at the same positions."""
    masking = pytest.importorskip("transformers.masking_utils")
    mask_function = masking.sliding_window_causal_mask_function(window)
    batch = make_batch(Shape((6,), (7,)), block_size=4, num_heads=1, num_kv_heads=1, head_size=4,
                       dtype=torch.float32, seed=0)
    theirs = torch.tensor([[bool(mask_function(0, 0, torch.tensor(q), torch.tensor(k))) for k in range(13)]
                           for q in range(6, 13)])
    assert torch.equal(visible_positions(batch.metadata, 0, window), theirs)
    assert torch.equal(visible_mask(7, 13, window=window), theirs)


def test_the_kits_tree_positions_are_depths() -> None:
    """Under a tree, a node at depth d sees the cached positions within ``window - d`` of the end."""
    batch = make_batch(Shape((10,), (4,)), block_size=4, num_heads=1, num_kv_heads=1, head_size=4,
                       dtype=torch.float32, seed=0)
    chain_of_siblings = torch.tensor([[1, 0, 0, 0], [1, 1, 0, 0], [1, 0, 1, 0], [1, 0, 1, 1]], dtype=torch.bool)
    metadata = attrs.evolve(batch.metadata, tree_mask=chain_of_siblings)  # depths 0, 1, 1, 2
    visible = visible_positions(metadata, 0, 3)
    assert visible[:, :10].sum(dim=1).tolist() == [2, 1, 1, 0]
    assert torch.equal(visible[:, 10:], chain_of_siblings)
    assert torch.equal(visible_mask(4, 14, chain_of_siblings, 3), visible)


@given(block_size=st.integers(1, 8), data=st.data())
def test_cache_slots_address_the_block_and_offset_of_each_position(block_size: int, data: st.DataObject) -> None:
    """Slot ``s`` of position ``p`` is the flat index of ``cache[:, table[p // bs], p % bs]`` in the cache
    viewed as ``[2, num_blocks * block_size, ...]`` (torch's own indexing is the oracle)."""
    num_blocks = data.draw(st.integers(1, 6))
    table = data.draw(st.lists(st.integers(0, num_blocks - 1), min_size=1, max_size=5))
    positions = data.draw(st.lists(st.integers(0, len(table) * block_size - 1), max_size=12))
    cache = torch.arange(2 * num_blocks * block_size * 3).view(2, num_blocks, block_size, 3, 1)
    flat = cache.view(2, -1, 3, 1)
    slots = cache_slots(table, positions, block_size)
    assert len(slots) == len(positions)
    for position, slot in zip(positions, slots, strict=True):
        assert torch.equal(flat[:, slot], cache[:, table[position // block_size], position % block_size])


@pytest.mark.parametrize(("fields", "message"), [
    ({"num_heads": 6, "num_kv_heads": 4}, r"num_heads \(6\) must be a positive multiple of num_kv_heads \(4\)"),
    ({"num_heads": 4, "num_kv_heads": 0}, r"num_heads \(4\) must be a positive multiple of num_kv_heads \(0\)"),
    ({"head_size": 0}, "head_size must be positive, got 0"),
    ({"block_size": -16}, "block_size must be positive, got -16"),
    ({"sliding_windows": (None, 0)}, r"sliding_windows\[1\] must be a positive int or None \(no window\), got 0"),
    ({"sliding_windows": (4.0,)}, r"sliding_windows\[0\] must be a positive int or None \(no window\), got 4.0"),
    ({"logits_soft_cap": 0.0}, "logits_soft_cap must be a positive finite number or None"),
    ({"logits_soft_cap": float("inf")}, "logits_soft_cap must be a positive finite number or None"),
])
def test_context_refuses_impossible_layouts(fields: dict[str, object], message: str) -> None:
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


def test_context_windows_by_layer() -> None:
    base = {"num_heads": 8, "num_kv_heads": 2, "head_size": 64, "scale": 0.125, "block_size": 16, "dtype": "float32"}
    plain = AttentionContext(**base)
    assert plain.window(5) is None and not plain.has_window and plain.logits_soft_cap is None
    windowed = AttentionContext(**base, sliding_windows=[4096, None], logits_soft_cap=50)
    assert windowed.sliding_windows == (4096, None) and windowed.has_window
    assert (windowed.window(0), windowed.window(1)) == (4096, None)
