"""``adaptive`` follows the better of its experts: on a trace where LRU wins and one where
turn-aware wins, it hits about as often as the winner, each expert run alone being the reference."""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import pytest

from pyagent_core.interfaces.eviction import EvictionContext, EvictionPolicy
from pyagent_kvcache_policies.adaptive import AdaptivePolicy
from pyagent_kvcache_policies.lru import LruPolicy
from pyagent_kvcache_policies.plugin import SPECS
from pyagent_kvcache_policies.turn_aware import TurnAwarePolicy

CAPACITY = 400
SPEC = {spec.name: spec for spec in SPECS}
POLICIES: dict[str, type[EvictionPolicy]] = {
    "lru": LruPolicy, "turn-aware": TurnAwarePolicy, "adaptive": AdaptivePolicy}


def make(name: str) -> EvictionPolicy:
    options = {key: option.default for key, option in SPEC[name].options.items()}
    return POLICIES[name](options, EvictionContext(CAPACITY, 16))


def hits(policy: EvictionPolicy, accesses: Sequence[int]) -> int:
    """Serve single-block requests as a pool does: a hit is taken and given back, a miss inserted
    after evicting when full."""
    count = 0
    for block in accesses:
        if block in policy:
            policy.remove(block)
            count += 1
        elif len(policy) >= policy.capacity:
            policy.evict()
        policy.insert(block)
    return count


def reuse_soon(requests: int = 6000, distance: int = CAPACITY // 4) -> list[int]:
    """Every block is used twice, ``distance`` new blocks apart: within LRU's reach, but past
    turn-aware's small queue, so LRU wins."""
    accesses = []
    for block in range(requests):
        accesses.append(block)
        if block >= distance:
            accesses.append(block - distance)
    return accesses


def hot_set_and_scans(rounds: int = 6000, hot: int = CAPACITY // 2, scan: int = 2) -> list[int]:
    """A hot set of half the capacity cycled through, ``scan`` one-off blocks after each hot one:
    reuse lies 1.5 capacities back, beyond LRU, while turn-aware keeps the hot set in its main queue
    and lets the scans through its small one."""
    fresh = itertools.count(hot)
    accesses = []
    for step in range(rounds):
        accesses.append(step % hot)
        accesses += [next(fresh) for _ in range(scan)]
    return accesses


@pytest.mark.parametrize(("trace", "winner", "loser"), [
    (reuse_soon(), "lru", "turn-aware"),
    (hot_set_and_scans(), "turn-aware", "lru"),
], ids=["lru-wins", "turn-aware-wins"])
def test_adaptive_follows_the_better_expert(trace: list[int], winner: str, loser: str) -> None:
    best, worst = hits(make(winner), trace), hits(make(loser), trace)
    assert best > 4 * worst + 1000, f"the trace should favour {winner}: {best} hits against {worst}"
    adaptive = make("adaptive")
    assert isinstance(adaptive, AdaptivePolicy)
    mine = hits(adaptive, trace)
    assert mine >= 0.97 * best, f"adaptive hit {mine} times, {winner} alone {best} ({loser}: {worst})"
    assert adaptive.leader == winner


def test_adaptive_switches_when_the_traffic_changes() -> None:
    first, second = reuse_soon(), [block + 10**6 for block in hot_set_and_scans()]
    trace = first + second
    alone = {name: hits(make(name), trace) for name in ("lru", "turn-aware")}
    adaptive = make("adaptive")
    assert isinstance(adaptive, AdaptivePolicy)
    mine = hits(adaptive, trace)
    best_per_phase = hits(make("lru"), first) + hits(make("turn-aware"), second)
    assert mine >= 0.9 * best_per_phase and mine > 1.5 * max(alone.values()), (mine, best_per_phase, alone)
    assert adaptive.leader == "turn-aware"
