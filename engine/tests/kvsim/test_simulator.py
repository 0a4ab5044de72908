"""The trace simulator: trace loading; replays through the engine's prefix index keep prefixes
cached, stay within capacity and give a content one policy id; MIN against an exhaustive search and
against every policy."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pyagent_core.errors import TraceError
from pyagent_core.interfaces.eviction import EvictionContext
from pyagent_engine.benchmarks.kvcache import policy_factories
from pyagent_engine.benchmarks.shared_data import SHARED_DATA
from pyagent_engine.kvsim.belady import BeladyCache, next_uses
from pyagent_engine.kvsim.replay import TraceCache
from pyagent_engine.kvsim.simulator import (
    MIN,
    RecordingPolicy,
    gap_closed,
    record_and_time,
    record_calls,
    replay,
    replay_all,
    replay_min,
    replay_policy,
)
from pyagent_engine.kvsim.trace import BlockTrace, load_trace

CONVERSATION = SHARED_DATA / "mooncake" / "conversation_trace.jsonl"
SETTINGS = settings(max_examples=60, deadline=None, derandomize=True, database=None)


def installed_policies() -> dict:
    factories = policy_factories()
    if not factories:
        pytest.skip("no eviction policy installed")
    return factories


def tree_trace(paths: list[list[int]]) -> BlockTrace:
    """Requests as paths in a small tree: one block id per distinct prefix, so the ids chain; some
    requests end in a partial block."""
    ids: dict[tuple[int, ...], int] = {}
    return BlockTrace.from_chains(
        [[ids.setdefault(tuple(path[:i + 1]), len(ids)) for i in range(len(path))] for path in paths],
        block_size=4, input_lengths=[4 * len(path) - (i % 3) for i, path in enumerate(paths)])


def exhaustive_optimum(trace: BlockTrace, capacity: int) -> int:
    """Most hits any sequence of legal evictions achieves (same rules as TraceCache), by search."""
    parents = {block: (chain[i - 1] if i else None) for chain in trace.requests for i, block in enumerate(chain)}

    @cache
    def best(index: int, cached: frozenset[int]) -> int:
        if index == len(trace.requests):
            return 0
        chain = trace.requests[index]
        hits = 0
        while hits < len(chain) and chain[hits] in cached:
            hits += 1
        return hits + fill(index, hits, cached)

    @cache
    def fill(index: int, position: int, cached: frozenset[int]) -> int:
        chain = trace.requests[index]
        if position == len(chain):
            return best(index + 1, cached)
        if len(cached) < capacity:
            return fill(index, position + 1, cached | {chain[position]})
        in_use = set(chain[:position])
        with_children = {parents[block] for block in cached}
        victims = [block for block in cached if block not in in_use and block not in with_children]
        if not victims:
            return best(index + 1, cached)
        return max(fill(index, position + 1, (cached - {victim}) | {chain[position]}) for victim in victims)

    return best(0, frozenset())


chains = st.lists(st.lists(st.integers(0, 3), min_size=1, max_size=6), min_size=1, max_size=25)


@SETTINGS
@given(paths=chains, capacity=st.integers(1, 8))
def test_replays_keep_prefixes_cached_and_within_capacity(paths: list[list[int]], capacity: int) -> None:
    trace = tree_trace(paths)
    for name, factory in installed_policies().items():
        cache = TraceCache(factory(EvictionContext(capacity, trace.block_size)))
        index = cache.index
        for chain, last_tokens in zip(trace.requests, trace.last_tokens, strict=True):
            cached_prefix = 0
            while cached_prefix < len(chain) and index.find(chain[cached_prefix]) is not None:
                cached_prefix += 1
            assert cache.serve(chain, last_tokens) == cached_prefix, name
            assert len(index) <= capacity, name
            cached = [block for block in range(trace.unique_blocks) if block in index]
            for block in cached:
                parent = index.entry(block).parent
                assert parent is None or index.find(parent) is not None, f"{name}: {block} cached without its parent"
                assert index.is_evictable(block), f"{name}: {block} is unused but not evictable"
            assert index.num_unpinned == len(index), name


@SETTINGS
@given(paths=chains, capacity=st.integers(1, 8))
def test_a_content_keeps_one_policy_id_until_the_policy_forgets_it(paths: list[list[int]], capacity: int) -> None:
    trace = tree_trace(paths)
    for name, factory in installed_policies().items():
        recorder = RecordingPolicy(factory(EvictionContext(capacity, trace.block_size)))
        cache = TraceCache(recorder)
        seen: dict[int, int] = {}  # content (trace block) -> its policy id
        owner: dict[int, int] = {}  # policy id -> its content
        calls = 0
        for chain, last_tokens in zip(trace.requests, trace.last_tokens, strict=True):
            cache.serve(chain, last_tokens)
            for method, args in recorder.calls[calls:]:
                if method == "forget":
                    del seen[owner.pop(args[0])]
            calls = len(recorder.calls)
            for block in chain:
                if block not in cache.index:
                    continue
                policy_id = cache.index.entry(block).policy_id
                if block in seen:
                    assert seen[block] == policy_id, f"{name}: block {block} changed id without a forget"
                else:
                    assert policy_id not in owner, f"{name}: id {policy_id} names {owner.get(policy_id)} and {block}"
                    seen[block], owner[policy_id] = policy_id, block


@SETTINGS
@given(paths=chains, capacity=st.integers(1, 8))
def test_recording_a_replay_changes_nothing(paths: list[list[int]], capacity: int) -> None:
    trace = tree_trace(paths)
    for name, factory in installed_policies().items():
        assert record_calls(trace, factory, capacity, name)[0] == replay_policy(trace, factory, capacity, name)


def test_min_replays_its_trace_in_order() -> None:
    trace = BlockTrace.from_chains([[0, 1], [0, 2]])
    cache = BeladyCache(trace, 2)
    with pytest.raises(ValueError, match="in order"):
        cache.serve((0, 2), 512)


small_traces = st.lists(st.lists(st.integers(0, 2), min_size=1, max_size=4), min_size=1, max_size=9)


@SETTINGS
@given(paths=small_traces, capacity=st.integers(1, 4))
def test_min_matches_exhaustive_search_on_tiny_traces(paths: list[list[int]], capacity: int) -> None:
    trace = tree_trace(paths)
    assert replay_min(trace, capacity).hits == exhaustive_optimum(trace, capacity)


@SETTINGS
@given(paths=st.lists(st.lists(st.integers(0, 3), min_size=1, max_size=7), min_size=1, max_size=40),
       capacity=st.integers(1, 12))
def test_no_policy_beats_min_on_random_traces(paths: list[list[int]], capacity: int) -> None:
    results = replay_all(tree_trace(paths), installed_policies(), capacity)
    best = results.pop(MIN)
    for name, result in results.items():
        assert result.hits <= best.hits, f"{name} hit {result.hits} blocks, MIN only {best.hits}"


@pytest.mark.skipif(not CONVERSATION.exists(), reason="Mooncake conversation trace not present")
def test_no_policy_beats_min_on_a_mooncake_sample() -> None:
    trace = load_trace(CONVERSATION, limit=600)
    for capacity in (100, 800):
        results = replay_all(trace, installed_policies(), capacity)
        optimum = results[MIN]
        assert all(r.hits <= optimum.hits for r in results.values())
        assert optimum.hits > results["lru"].hits  # the sample leaves a gap to close
        assert gap_closed(results["lru"], results["lru"], optimum) == 0.0


def test_next_uses_by_hand() -> None:
    trace = BlockTrace.from_chains([[0, 1], [0, 2], [0, 1, 3]])
    assert next_uses(trace) == [[1, 2], [2, 3], [3, 3, 3]]


def test_hits_count_the_longest_cached_prefix_only() -> None:
    # capacity 3: [0, 1, 2] fills the cache; [0, 3] evicts the leaf 2 (never used again by MIN);
    # [0, 1, 2] then finds 0 and 1 cached (2 was evicted) -> 1 + 2 hits.
    trace = BlockTrace.from_chains([[0, 1, 2], [0, 3], [0, 1, 2]])
    result = replay_min(trace, 3)
    assert (result.hits, result.requested) == (3, 8)


def test_recorded_calls_replay_to_a_timing() -> None:
    policies = installed_policies()
    trace = tree_trace([[0, 1, 2], [0, 1, 3], [1, 2], [0, 1, 2, 3]] * 5)
    timed = record_and_time(trace, {"lru": policies["lru"], "fifo": policies["fifo"]}, 3, rounds=2)
    for name, (result, ns, calls) in timed.items():
        assert result == replay_policy(trace, policies[name], 3, name) and ns > 0
        recorder = RecordingPolicy(policies[name](EvictionContext(3, trace.block_size)))
        replay(trace, TraceCache(recorder), name)
        assert calls == len(recorder.calls)


def write_lines(tmp_path: Path, lines: list[str]) -> Path:
    path = tmp_path / "trace.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_load_trace_reads_tokens_of_the_last_block(tmp_path: Path) -> None:
    path = write_lines(tmp_path, [json.dumps({"hash_ids": [0, 1], "input_length": 600}),
                                  json.dumps({"hash_ids": [0, 2]})])
    trace = load_trace(path)
    assert trace.requests == ((0, 1), (0, 2)) and trace.last_tokens == (88, 512)
    assert (trace.total_blocks, trace.unique_blocks) == (4, 3)


@pytest.mark.parametrize(("lines", "message"), [
    (["{not json"], "not JSON"),
    ([json.dumps({"input_length": 3})], "no 'hash_ids'"),
    ([json.dumps({"hash_ids": [0, 1]}), json.dumps({"hash_ids": [2, 1]})], "one parent per id"),
    ([json.dumps({"hash_ids": [0, 0]})], "lists a block id twice"),
    ([json.dumps({"hash_ids": [0, -1]})], "ids must be ints >= 0"),
    ([""], "holds no requests"),
])
def test_bad_traces_raise_trace_error(tmp_path: Path, lines: list[str], message: str) -> None:
    with pytest.raises(TraceError, match=message):
        load_trace(write_lines(tmp_path, lines))


def test_missing_trace_raises_trace_error(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match="cannot read trace"):
        load_trace(tmp_path / "absent.jsonl")
