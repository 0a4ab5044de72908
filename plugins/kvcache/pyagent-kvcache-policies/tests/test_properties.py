"""Property tests of every policy: random operation sequences against a set model, ARC's invariants,
and ghost lists that stay within the ``history`` a policy declares. (Replays of random prefix-chain
traces through the engine's prefix index, with every installed policy, are in ``engine/tests/kvsim``.)"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pyagent_core.errors import EvictionError
from pyagent_core.interfaces.eviction import BlockInfo, EvictionContext, EvictionPolicy
from pyagent_core.lazy import import_impl
from pyagent_core.options import validate_options
from pyagent_kvcache_policies.arc import ArcPolicy
from pyagent_kvcache_policies.plugin import SPECS
from pyagent_kvcache_policies.s3fifo import S3FifoPolicy
from pyagent_kvcache_policies.turn_aware import TurnAwarePolicy

SETTINGS = settings(max_examples=40, deadline=None, derandomize=True, database=None)
NAMES = [spec.name for spec in SPECS]


def make(name: str, capacity: int) -> EvictionPolicy:
    spec = next(s for s in SPECS if s.name == name)
    context = EvictionContext(capacity=capacity, block_size=512)
    policy: EvictionPolicy = import_impl(spec.impl)(validate_options(spec.options, {}, name), context)
    return policy


def ghosts(policy: EvictionPolicy) -> int:
    """Evicted ids the policy still remembers (0 for policies without a ghost list)."""
    if isinstance(policy, ArcPolicy):
        return len(policy.b1) + len(policy.b2)
    if isinstance(policy, S3FifoPolicy | TurnAwarePolicy):  # adaptive is a TurnAwarePolicy
        return len(policy.ghost)
    return 0


operations = st.lists(st.tuples(st.sampled_from(["insert", "remove", "touch", "evict", "forget"]),
                                st.integers(0, 11), st.integers(0, 40), st.booleans()), max_size=120)


def arc_invariants(policy: ArcPolicy) -> None:
    c = policy.capacity
    t1, t2, b1, b2 = (set(q) for q in (policy.t1, policy.t2, policy.b1, policy.b2))
    assert len(t1) + len(t2) <= c
    assert len(t1) + len(b1) <= c
    assert len(t1) + len(t2) + len(b1) + len(b2) <= 2 * c
    assert not (t1 | t2) & (b1 | b2) and not t1 & t2 and not b1 & b2
    assert 0 <= policy.p <= c


@pytest.mark.parametrize("name", NAMES)
@SETTINGS
@given(capacity=st.integers(1, 6), ops=operations)
def test_random_operations_respect_capacity_and_never_evict_absent_blocks(
        name: str, capacity: int, ops: list[tuple[str, int, int, bool]]) -> None:
    policy = make(name, capacity)
    present: set[int] = set()
    for op, block, depth, full in ops:
        if op == "insert" and block not in present and len(present) < capacity:
            policy.insert_with_info(block, BlockInfo(depth, 512 if full else 7, None, full))
            present.add(block)
        elif op in ("remove", "touch") and block in present:
            getattr(policy, op)(block)
            if op == "remove":
                present.discard(block)
        elif op == "forget" and block not in present:
            policy.forget(block)
        elif op == "evict":
            if not present:
                with pytest.raises(EvictionError):
                    policy.evict()
            else:
                victim = policy.evict()
                assert victim in present, f"{name} evicted {victim}, which is not evictable ({present})"
                present.remove(victim)
        assert len(policy) == len(present) <= capacity
        assert ghosts(policy) <= policy.history, f"{name} remembers more evicted ids than its history"
        if isinstance(policy, ArcPolicy):
            arc_invariants(policy)


def test_arc_ghost_hit_adapts_target() -> None:
    policy = ArcPolicy({}, EvictionContext(capacity=2, block_size=512))
    policy.insert(1)
    policy.insert(2)
    assert policy.evict() == 1 and 1 in policy.b1
    policy.insert(1)  # a B1 hit: T1 deserved more room
    assert policy.p == 1.0 and 1 in policy.t2
    assert policy.evict() == 1 and 1 in policy.b2  # |T1| = 1 is not above p = 1: T2 gives the victim


def test_taken_and_returned_blocks_count_as_reused() -> None:
    policies: dict[str, Any] = {name: make(name, 4) for name in ("lfu", "slru", "arc", "s3-fifo", "turn-aware")}
    for name, policy in policies.items():
        policy.insert(1)
        policy.insert(2)
        policy.remove(1)  # a request takes block 1...
        policy.insert(1)  # ...and gives it back: a hit
        assert policy.evict() == 2, name


def test_turn_aware_remembers_a_block_someone_else_evicted() -> None:
    policy = make("turn-aware", 8)
    assert isinstance(policy, TurnAwarePolicy)
    for block in range(4):
        policy.insert(block)
    policy.discard(2)  # chosen by another expert, as adaptive's LRU does
    assert 2 not in policy and len(policy) == 3 and 2 in policy.ghost
    policy.insert(2)  # back while remembered: a returning turn enters main
    assert 2 in policy.main and 2 not in policy.small
    policy.insert_with_info(9, BlockInfo(depth=1, tokens=7, parent=0, full=False))
    policy.discard(9)  # a partial tail is not remembered
    assert 9 not in policy.ghost and 9 not in policy
