"""Scheduler and block pool: budgets, chunked prefill, preemption by recompute, nothing lost.

The model is replaced by a simulation that advances ``num_computed_tokens`` and appends a token
when a chunk samples, exactly as the engine does; hypothesis drives random workloads.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pyagent_engine.kv.block_pool import BlockPool
from pyagent_engine.kv.manager import KVCacheManager
from pyagent_engine.requests.params import SamplingParams
from pyagent_engine.requests.request import Request
from pyagent_engine.scheduling.scheduler import Scheduler


def simulate(scheduler: Scheduler, requests: list[Request], max_steps: int = 10_000) -> list[dict]:
    """Run until every request has its ``max_tokens``; return per-step facts for assertions."""
    for request in requests:
        scheduler.add(request)
    steps = []
    while scheduler.has_work():
        assert len(steps) < max_steps, "the scheduler stopped making progress"
        plan = scheduler.schedule()
        assert plan.chunks, "a step scheduled nothing while work remained"
        steps.append({"tokens": plan.num_tokens, "seqs": len(plan.chunks), "preempted": len(plan.preempted)})
        for chunk in plan.chunks:
            request = chunk.request
            assert chunk.num_tokens > 0
            assert -(-(request.num_computed_tokens + chunk.num_tokens) // scheduler.kv.block_size) <= len(
                request.block_ids), "a chunk was scheduled without blocks for it"
            request.num_computed_tokens += chunk.num_tokens
            if chunk.sample:
                assert request.num_computed_tokens == request.num_tokens
                request.output_token_ids.append(len(request.output_token_ids))
                if len(request.output_token_ids) == request.params.max_tokens:
                    scheduler.finish(request)
        held = sum(len(r.block_ids) for r in scheduler.running)
        assert held + scheduler.kv.num_free == scheduler.kv.num_blocks, "blocks leaked"
    return steps


def make(index: int, prompt: int, out: int) -> Request:
    return Request(f"r{index}", list(range(prompt)), SamplingParams(max_tokens=out))


@settings(max_examples=60, deadline=None)
@given(
    workload=st.lists(st.tuples(st.integers(1, 70), st.integers(1, 20)), min_size=1, max_size=12),
    block_size=st.sampled_from([1, 4, 16]),
    budget=st.integers(8, 64),
    max_seqs=st.integers(1, 8),
    spare=st.integers(0, 40),
)
def test_every_request_finishes_with_all_its_tokens(workload, block_size, budget, max_seqs, spare):
    largest = max(-(-(p + o) // block_size) for p, o in workload)
    scheduler = Scheduler(KVCacheManager(BlockPool(largest + spare), block_size), max_seqs, max(budget, max_seqs))
    requests = [make(i, p, o) for i, (p, o) in enumerate(workload)]
    steps = simulate(scheduler, requests)
    for request in requests:
        assert request.output_token_ids == list(range(request.params.max_tokens))
        assert request.block_ids == []
    assert all(s["tokens"] <= max(budget, max_seqs) and s["seqs"] <= max_seqs for s in steps)
    assert scheduler.kv.num_free == scheduler.kv.num_blocks


def test_long_prompt_is_prefilled_in_chunks_within_the_budget():
    scheduler = Scheduler(KVCacheManager(BlockPool(64), 16), 4, 32)
    request = make(0, 100, 1)
    steps = simulate(scheduler, [request])
    assert [s["tokens"] for s in steps] == [32, 32, 32, 4]


def test_decodes_go_before_new_prefills():
    scheduler = Scheduler(KVCacheManager(BlockPool(64), 4), 4, 8)
    first = make(0, 8, 5)
    scheduler.add(first)
    plan = scheduler.schedule()
    first.num_computed_tokens += plan.chunks[0].num_tokens
    first.output_token_ids.append(0)
    scheduler.add(make(1, 20, 1))
    plan = scheduler.schedule()
    assert plan.chunks[0].request is first and plan.chunks[0].num_tokens == 1
    assert plan.chunks[1].num_tokens == 7


def test_memory_pressure_preempts_and_recomputes():
    scheduler = Scheduler(KVCacheManager(BlockPool(6), 4), 4, 64)
    requests = [make(i, 7, 9) for i in range(3)]
    steps = simulate(scheduler, requests)
    assert sum(s["preempted"] for s in steps) > 0
    assert any(r.num_preemptions for r in requests)


def test_budget_smaller_than_sequence_limit_is_rejected():
    with pytest.raises(ValueError, match="max_num_batched_tokens"):
        Scheduler(KVCacheManager(BlockPool(4), 4), max_num_seqs=8, max_num_batched_tokens=4)


def test_block_pool_is_all_or_nothing():
    pool = BlockPool(3)
    assert pool.allocate(4) is None and pool.num_free == 3
    got = pool.allocate(2)
    assert len(set(got)) == 2 and pool.num_free == 1
    pool.free(got)
    assert pool.num_free == 3
    with pytest.raises(ValueError, match="at least one block"):
        BlockPool(0)
