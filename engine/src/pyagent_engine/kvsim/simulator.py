"""Replays a block trace through eviction policies and through MIN, at given capacities.

Every replay serves the trace through a :class:`~pyagent_engine.kvsim.replay.TraceCache`, that is
through the engine's own :class:`~pyagent_engine.kv.prefix_index.PrefixIndex` (longest cached prefix,
blocks in use never evicted, leaves first), so hit ratios differ only by victim choice, and MIN is
one more policy over the same index.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

import attrs

from pyagent_core.interfaces.eviction import BlockInfo, EvictionContext, EvictionPolicy
from pyagent_engine.kvsim.belady import BeladyCache
from pyagent_engine.kvsim.replay import TraceCache
from pyagent_engine.kvsim.trace import BlockTrace

PolicyFactory = Callable[[EvictionContext], EvictionPolicy]
"""Builds a policy for a pool (e.g. ``lambda context: LruPolicy({}, context)``)."""

Calls = list[tuple[str, tuple[Any, ...]]]
"""Policy calls as :class:`RecordingPolicy` records them: method name and arguments."""

MIN = "min"
"""The name MIN's results go by."""


@attrs.frozen
class ReplayResult:
    """Hits of one cache on one trace at one capacity."""

    name: str
    capacity: int
    hits: int
    requested: int
    evictions: int

    @property
    def hit_ratio(self) -> float:
        """Blocks found cached (longest cached prefix) over blocks requested."""
        return self.hits / self.requested if self.requested else 0.0


def replay(trace: BlockTrace, cache: TraceCache, name: str) -> ReplayResult:
    """Serve every request of ``trace`` through ``cache`` in order."""
    serve = cache.serve
    for chain, last_tokens in zip(trace.requests, trace.last_tokens, strict=True):
        serve(chain, last_tokens)
    return ReplayResult(name, cache.capacity, cache.hits, cache.requested, cache.evictions)


def replay_policy(trace: BlockTrace, factory: PolicyFactory, capacity: int, name: str) -> ReplayResult:
    """Replay ``trace`` through a prefix cache whose victims a fresh policy from ``factory`` picks."""
    return replay(trace, TraceCache(factory(EvictionContext(capacity, trace.block_size))), name)


def replay_min(trace: BlockTrace, capacity: int) -> ReplayResult:
    """Replay ``trace`` through Belady's MIN under the prefix constraint."""
    return replay(trace, BeladyCache(trace, capacity), MIN)


class RecordingPolicy(EvictionPolicy):
    """Passes every call on to ``inner`` and records it, so the calls can be timed alone later.

    It declares ``inner``'s history, so the index keeps dropped ids for it as long as for ``inner``.
    """

    def __init__(self, inner: EvictionPolicy) -> None:
        super().__init__(inner.options, inner.context)
        self.inner = inner
        self.history = inner.history
        self.calls: Calls = []

    def insert(self, block_id: int) -> None:
        """Record and forward."""
        self.calls.append(("insert", (block_id,)))
        self.inner.insert(block_id)

    def insert_with_info(self, block_id: int, info: BlockInfo | None) -> None:
        """Record and forward."""
        self.calls.append(("insert_with_info", (block_id, info)))
        self.inner.insert_with_info(block_id, info)

    def touch(self, block_id: int) -> None:
        """Record and forward."""
        self.calls.append(("touch", (block_id,)))
        self.inner.touch(block_id)

    def remove(self, block_id: int) -> None:
        """Record and forward."""
        self.calls.append(("remove", (block_id,)))
        self.inner.remove(block_id)

    def forget(self, block_id: int) -> None:
        """Record and forward."""
        self.calls.append(("forget", (block_id,)))
        self.inner.forget(block_id)

    def evict(self) -> int:
        """Record and forward."""
        self.calls.append(("evict", ()))
        return self.inner.evict()

    def __len__(self) -> int:
        return len(self.inner)

    def __contains__(self, block_id: object) -> bool:
        return block_id in self.inner


def time_policy_calls(factory: PolicyFactory, context: EvictionContext, calls: Calls) -> float:
    """Nanoseconds per call of a fresh policy replaying ``calls`` (recorded by :class:`RecordingPolicy`).

    The policies are deterministic, so the replayed calls meet the same states as in the recording.
    The loop's own overhead is included, the same for every policy.
    """
    policy = factory(context)
    bound = [(getattr(policy, method), args) for method, args in calls]
    start = time.perf_counter_ns()
    for method, args in bound:
        method(*args)
    elapsed = time.perf_counter_ns() - start
    return elapsed / max(1, len(bound))


def record_calls(trace: BlockTrace, factory: PolicyFactory, capacity: int, name: str) -> tuple[ReplayResult, Calls]:
    """Replay ``trace`` through a policy while recording the calls it receives."""
    recorder = RecordingPolicy(factory(EvictionContext(capacity, trace.block_size)))
    result = replay(trace, TraceCache(recorder), name)
    return result, recorder.calls


def record_and_time(trace: BlockTrace, factories: Mapping[str, PolicyFactory], capacity: int,
                    rounds: int = 3) -> dict[str, tuple[ReplayResult, float, int]]:
    """Replay ``trace`` through each policy while recording its calls, then time those calls alone.

    Returns, per policy, its result, nanoseconds per call and the number of calls it received
    (policies receive different numbers: the index calls ``forget`` only on policies that keep
    history, and a policy that evicts less is called less). The timings take turns (every policy
    once per round) and each policy keeps its fastest round, so a stretch of load from other work
    slows every policy alike or none.
    """
    context = EvictionContext(capacity, trace.block_size)
    recorded = {name: record_calls(trace, factory, capacity, name) for name, factory in factories.items()}
    fastest = dict.fromkeys(factories, float("inf"))
    for _ in range(max(1, rounds)):
        for name, factory in factories.items():
            fastest[name] = min(fastest[name], time_policy_calls(factory, context, recorded[name][1]))
    return {name: (result, fastest[name], len(calls)) for name, (result, calls) in recorded.items()}


def gap_closed(result: ReplayResult, lru: ReplayResult, optimum: ReplayResult) -> float | None:
    """Share of the LRU-to-MIN hit-ratio gap that ``result`` closes (negative: worse than LRU).

    ``None`` when MIN and LRU hit alike (no gap to close).
    """
    gap = optimum.hits - lru.hits
    return (result.hits - lru.hits) / gap if gap else None


def replay_all(trace: BlockTrace, factories: Mapping[str, PolicyFactory], capacity: int) -> dict[str, ReplayResult]:
    """Every policy and MIN at one capacity, by name."""
    results = {name: replay_policy(trace, factory, capacity, name) for name, factory in factories.items()}
    results[MIN] = replay_min(trace, capacity)
    return results
