"""``pyagent_core.interfaces.cache``: what a layout costs, what a budget buys, the engine features a
layout rules out, and the zeroed caches it allocates."""

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


def _rss() -> int:
    """This process's resident set size in bytes."""
    for line in open("/proc/self/status").read().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS in /proc/self/status")


def test_allocated_caches_are_zero_and_take_memory_only_where_written():
    """A layout's caches are zeroed tensors of the declared shapes, and allocating them makes none of a large
    one resident (a gibibyte of KV cache costs nothing at start-up): 82 MiB allocated, RSS grows < 8 MiB."""
    torch = pytest.importorskip("torch")
    state = RecurrentState("mamba2", ("conv", "ssm"), ((64, 4), (8, 64, 16)))
    layout = CacheLayout([PagedKV(4, 64), LatentKV(96, 32), state])
    before = _rss()
    paged, latent, states = layout.allocate(4096, 16, 64, torch.bfloat16)  # 64 MiB, 16 MiB, 2.1 MiB
    grown = _rss() - before
    assert grown < 8 * 2**20, f"allocating the caches made {grown / 2**20:.0f} MiB resident"
    assert (paged.shape, paged.dtype, latent.shape) == ((2, 4096, 16, 4, 64), torch.bfloat16, (4096, 16, 128))
    assert [(s.shape, s.dtype) for s in states] == [((64, 64, 4), torch.float32), ((64, 8, 64, 16), torch.float32)]
    assert all(int(t.count_nonzero()) == 0 for t in (paged, latent, *states))
    paged[1, 7] = 1.0
    states[1][3] = 2.0
    assert int(paged.count_nonzero()) == 16 * 4 * 64 and bool(paged[1, 7].eq(1).all())
    assert int(states[1].count_nonzero()) == 8 * 64 * 16 and int(states[1][:3].count_nonzero()) == 0
