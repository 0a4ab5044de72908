"""The trace generator: seeded, and each kind of session has the reuse its documentation promises."""

from __future__ import annotations

import collections

import attrs

from pyagent_engine.kvsim.generate import WORKLOADS, TraceShape, generate_trace

SMALL = TraceShape(requests=400, sessions=12, system_tokens=300, agent_prompt_tokens=500, tool_tokens=300,
                   scan_tokens=400)


def test_the_same_shape_gives_the_same_trace_and_another_seed_another() -> None:
    first, again = generate_trace(SMALL), generate_trace(SMALL)
    assert first == again
    assert generate_trace(attrs.evolve(SMALL, seed=7)).requests != first.requests
    assert len(first.requests) == SMALL.requests and first.block_size == SMALL.block_size


def test_scans_share_only_their_instruction() -> None:
    shape = attrs.evolve(SMALL, mix=(0.0, 0.0, 1.0))
    trace = generate_trace(shape)
    shared = shape.scan_prefix_tokens // shape.block_size
    counts = collections.Counter(block for chain in trace.requests for block in chain)
    prefix = set(trace.requests[0][:shared])
    assert all(counts[block] == len(trace.requests) for block in prefix)
    assert all(count == 1 for block, count in counts.items() if block not in prefix)


def test_an_agent_step_rereads_the_previous_step_of_its_loop() -> None:
    trace = generate_trace(attrs.evolve(SMALL, mix=(0.0, 1.0, 0.0), sessions=1, agent_steps=6.0))
    continued = 0
    for index, chain in enumerate(trace.requests[1:]):
        previous = trace.requests[index]
        full = previous[:-1] if trace.last_tokens[index] < trace.block_size else previous
        if chain[:len(full)] == full:
            continued += 1
            assert len(chain) > len(full)
    assert continued > 0.6 * len(trace.requests), "most steps should continue the loop before them"


def test_chat_system_prompts_follow_zipf_popularity() -> None:
    shape = attrs.evolve(SMALL, requests=3000, mix=(1.0, 0.0, 0.0), system_prompts=10, zipf=1.2)
    trace = generate_trace(shape)
    first_blocks = collections.Counter(chain[0] for chain in trace.requests)
    counts = sorted(first_blocks.values(), reverse=True)
    assert len(counts) <= shape.system_prompts
    assert counts[0] > 3 * counts[-1], f"the top prompt should be far more popular: {counts}"


def test_workloads_name_their_mixes() -> None:
    assert set(WORKLOADS) == {"chat", "agent", "mixed"}
    assert WORKLOADS["chat"].mix[1] == 0 and WORKLOADS["agent"].mix[0] == 0 and min(WORKLOADS["mixed"].mix) > 0
