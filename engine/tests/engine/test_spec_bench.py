"""The spec-decode benchmark's bookkeeping (no timings): waves of prompts, the cost curve, the goals."""

from __future__ import annotations

import pytest

from pyagent_engine.benchmarks.spec_decode import CostCurve, SpecBenchSettings, _waves, goals


def test_waves_cover_every_prompt_in_full_batches() -> None:
    prompts = [[1], [2], [3]]
    assert _waves(prompts, 1) == [[[1]], [[2]], [[3]]]
    assert _waves(prompts, 2) == [[[1], [2]], [[3], [1]]]
    assert _waves(prompts, 8) == [[[1], [2], [3], [1], [2], [3], [1], [2]]]


def test_cost_curve_interpolates_and_extrapolates_its_measurements() -> None:
    curve = CostCurve([(1, 10.0), (4, 13.0), (5, 20.0), (5, 22.0), (9, 25.0)])
    assert curve.points == [(1, 10.0), (4, 13.0), (5, 21.0), (9, 25.0)]  # repeated sizes averaged
    assert curve(1) == 10.0 and curve(2) == pytest.approx(11.0) and curve(5) == 21.0
    assert curve(7) == pytest.approx(23.0) and curve(13) == pytest.approx(29.0)  # the last segment, extended
    assert CostCurve([(8, 4.0)])(16) == 8.0  # a single measurement: proportional


def row(workload: str, proposer: str, speedup: float, modelled: float, us: float, batch: int = 1) -> dict[str, object]:
    """A benchmark row with the fields the goals read."""
    return {"workload": workload, "batch": batch, "proposer": proposer, "speedup": speedup,
            "modelled_speedup": modelled, "proposer_us_per_step": us}


def test_goals_take_the_worst_rows_and_score_code_editing_per_batch() -> None:
    rows = [row("code_editing", "suffix", 1.9, 1.85, 12.0), row("code_editing", "suffix", 1.7, 1.75, 15.0),
            row("code_editing", "suffix", 1.2, 1.25, 18.0, batch=8), row("qa", "ngram", 0.97, 0.99, 25.0)]
    costs = [{"batch": 1, "draft_tokens": 0, "ratio": 1.0}, {"batch": 1, "draft_tokens": 4, "ratio": 1.25},
             {"batch": 1, "draft_tokens": 8, "ratio": 3.0}, {"batch": 8, "draft_tokens": 8, "ratio": 6.0}]
    code_b1, code_b8, slowest, cost = goals(rows, costs)
    assert (code_b1["value"], code_b1["met"], code_b1["modelled"]) == (1.7, False, 1.75)
    assert code_b1["ceiling"] == pytest.approx(4.0) and code_b8["ceiling"] == pytest.approx(1.5)  # 5 / 1.25, 9 / 6
    assert (code_b8["value"], code_b8["met"]) == (1.2, False)
    assert (slowest["value"], slowest["met"], slowest["modelled"]) == (0.97, True, 0.99)
    assert (cost["value"], cost["met"]) == (25.0, False)


def test_code_editing_requests_get_room_for_the_whole_edited_code() -> None:
    settings = SpecBenchSettings(max_tokens=64, code_editing_max_tokens=256)
    assert settings.tokens_for("code_editing") == 256
    assert settings.tokens_for("translation") == 64
