"""The scheduling benchmark's workloads and fairness index, checked without timing anything."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pyagent_engine.benchmarks.scheduling import (
    MOONCAKE,
    SchedulingBenchSettings,
    jain,
    max_min_shares,
    mooncake_shapes,
    mooncake_workload,
    step_demand,
    synthetic_workload,
)
from pyagent_engine.requests.params import SamplingParams
from pyagent_engine.requests.request import Request


def test_jain_index_spans_one_over_n_to_one():
    assert jain([3, 3, 3, 3]) == 1.0
    assert jain([5, 0, 0, 0]) == 0.25
    assert jain([0, 0]) is None


@pytest.mark.skipif(not MOONCAKE.exists(), reason="the Mooncake trace is not in ../shared/data")
def test_mooncake_replay_keeps_shared_prefixes_and_offers_the_asked_load():
    settings = SchedulingBenchSettings(requests=20)
    shapes = mooncake_shapes(settings, vocab=49152)
    assert len(shapes) == 20 and all(16 <= len(p) <= settings.max_prompt for _, p, _ in shapes)
    assert shapes[0][1][:16] == shapes[1][1][:16], "the trace's first two requests share hash id 0"
    arrivals = mooncake_workload(shapes, tokens_per_s=500.0, load=0.9, seed=0)
    offered = sum(a.work for a in arrivals) / max(a.time for a in arrivals)
    assert offered == pytest.approx(0.9 * 500.0)
    assert {a.tenant for a in arrivals} <= {"t0", "t1", "t2", "t3"} and {a.priority for a in arrivals} <= {0, 1}


def test_synthetic_mix_labels_are_seeded():
    settings = SchedulingBenchSettings(requests=30)
    first, again = (synthetic_workload(settings, 500.0, vocab=1000) for _ in range(2))
    assert first == again and sum(a.tenant == "t0" for a in first) > 10
    assert any(a.deadline_s is not None for a in first) and any(a.deadline_s is None for a in first)


@settings(max_examples=60, deadline=None)
@given(total=st.integers(0, 2000), demands=st.lists(st.integers(0, 600), min_size=1, max_size=5))
def test_max_min_shares_fill_as_equally_as_the_demands_allow(total, demands):
    asked = {f"t{i}": float(d) for i, d in enumerate(demands)}
    shares = max_min_shares(total, asked)
    assert sum(shares.values()) == pytest.approx(min(total, sum(demands)))
    assert all(shares[t] <= asked[t] + 1e-9 for t in asked)
    top = max(shares.values())
    # max-min: a tenant that got less than it asked for got as much as anyone
    assert all(shares[t] == pytest.approx(top) for t in asked if shares[t] < asked[t] - 1e-9)


def test_step_demand_counts_what_one_step_can_compute_and_the_sampled_token():
    request = Request("r", list(range(300)), SamplingParams(max_tokens=4))
    assert step_demand(request, budget=256, cached=0) == 256  # a prefill chunk, nothing sampled
    assert step_demand(request, budget=256, cached=64) == 236 + 1  # the rest fits: its first token too
    request.num_computed_tokens = 300
    request.output_token_ids.append(7)
    assert step_demand(request, budget=256, cached=0) == 2  # decoding: one token computed, one generated
