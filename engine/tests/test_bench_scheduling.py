"""The scheduling benchmark's workloads and fairness index, checked without timing anything."""

from __future__ import annotations

import pytest

from pyagent_engine.benchmarks.scheduling import (
    MOONCAKE,
    SchedulingBenchSettings,
    jain,
    mooncake_shapes,
    mooncake_workload,
    synthetic_workload,
)


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
