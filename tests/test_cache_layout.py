"""``pyagent_core.interfaces.cache``: what a layout costs, what a budget buys, and the engine features
a layout rules out."""

from __future__ import annotations

import pytest

from pyagent_core.interfaces.cache import (
    MIXER_DRAFT_LIMIT,
    STATE_LIMITS,
    CacheLayout,
    LatentKV,
    PagedKV,
    RecurrentState,
)

STATE = RecurrentState("short_conv", ("conv",), ((64, 2),))  # 128 float32 values: 512 bytes per sequence
HYBRID = CacheLayout([STATE, PagedKV(2, 16), STATE])  # 2 * 2 * 16 = 64 values per token


def test_bytes_per_token_and_per_sequence():
    assert (HYBRID.bytes_per_token(4), HYBRID.bytes_per_token(2), HYBRID.bytes_per_sequence()) == (256, 128, 1024)
    assert CacheLayout([LatentKV(32, 8)]).bytes_per_token(2) == 80 and not CacheLayout([LatentKV(32, 8)]).stateful


def test_a_budget_buys_the_slots_first_then_whole_blocks():
    budget = 4 * 1024 + 3 * 4 * 256 + 255  # four slots, three blocks of 4 tokens and a part of one
    assert HYBRID.num_blocks(budget, 4, 4, 4) == 3
    assert CacheLayout([STATE]).num_blocks(budget, 4, 4, 4) == 0  # nothing per token
    with pytest.raises(ValueError, match=r"5 state slots need 5120 bytes \(1024 per sequence\), more than the "
                                         r"cache budget of 4096 bytes"):
        HYBRID.num_blocks(4096, 4, 5, 4)


def test_what_a_layout_rules_out():
    assert HYBRID.limits(("short_conv",)) == STATE_LIMITS
    assert CacheLayout([LatentKV(32, 8)]).limits(("mla",)) == {"speculative decoding": MIXER_DRAFT_LIMIT}
    assert CacheLayout([PagedKV(2, 16)]).limits() == {}
