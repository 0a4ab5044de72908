"""``pyagent bench kvcache`` on a small trace: table, JSON file, and errors without tracebacks."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from pyagent_core.commands import command_line


def small_trace(tmp_path: Path) -> Path:
    lines = [{"hash_ids": [0, 1, 2]}, {"hash_ids": [0, 3]}, {"hash_ids": [0, 1, 2, 4]}, {"hash_ids": [0, 3, 5]}] * 3
    path = tmp_path / "trace.jsonl"
    path.write_text("\n".join(json.dumps(line) for line in lines), encoding="utf-8")
    return path


def test_bench_kvcache_writes_json_with_min_and_gap(tmp_path: Path) -> None:
    out = tmp_path / "report.json"
    result = CliRunner().invoke(command_line(), ["bench", "kvcache", "--trace", str(small_trace(tmp_path)),
                                      "--capacity", "2,4", "--policy", "fifo", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "min" in result.output and "gap closed" in result.output
    report = json.loads(out.read_text(encoding="utf-8"))
    rows = {(r["capacity"], r["policy"]): r for r in report["results"]}
    assert set(rows) == {(c, p) for c in (2, 4) for p in ("fifo", "lru", "min")}
    for capacity in (2, 4):
        assert rows[(capacity, "lru")]["gap_closed"] in (0.0, None)
        assert rows[(capacity, "min")]["hit_ratio"] >= rows[(capacity, "fifo")]["hit_ratio"]


def test_bench_kvcache_reports_bad_input_without_traceback(tmp_path: Path, cli) -> None:
    missing = cli("bench", "kvcache", "--trace", str(tmp_path / "absent.jsonl"))
    assert missing.returncode != 0 and "cannot read trace" in missing.stderr and "Traceback" not in missing.stderr
    bad = cli("bench", "kvcache", "--trace", str(small_trace(tmp_path)), "--capacity", "0")
    assert bad.returncode != 0 and "neither a positive number of blocks" in bad.stderr and "Traceback" not in bad.stderr
    unknown = cli("bench", "kvcache", "--generate", "nonsense")
    assert unknown.returncode != 0 and "choose one of: chat, agent, mixed" in unknown.stderr


def test_bench_kvcache_takes_several_traces_and_shares_of_their_blocks(tmp_path: Path) -> None:
    first = small_trace(tmp_path)
    second = tmp_path / "second.jsonl"
    second.write_text("\n".join(json.dumps({"hash_ids": ids}) for ids in ([7, 8], [9], [7, 8, 10], [9, 11]) * 2),
                      encoding="utf-8")
    out = tmp_path / "report.json"
    result = CliRunner().invoke(command_line(), ["bench", "kvcache", "--trace", str(first), "--trace", str(second),
                                             "--capacity", "50%,1", "--policy", "fifo", "--out", str(out)])
    assert result.exit_code == 0, result.output
    report = json.loads(out.read_text(encoding="utf-8"))
    assert [t["unique_blocks"] for t in report["traces"]] == [6, 5]
    sizes = {(r["trace"], r["share"]): r["capacity"] for r in report["results"]}
    assert sizes == {("trace.jsonl", "50%"): 3, ("trace.jsonl", "1"): 1,
                     ("second.jsonl", "50%"): 2, ("second.jsonl", "1"): 1}
    lru_rows = [r for r in report["results"] if r["policy"] == "lru"]
    assert all(r["points_vs_lru"] == 0 for r in lru_rows)
    summary = {r["policy"]: r for r in report["summary"]}
    fifo = [r for r in report["results"] if r["policy"] == "fifo"]
    assert summary["fifo"]["worst_points_vs_lru"] == min(r["points_vs_lru"] for r in fifo)
    requested = {t["trace"]: t["blocks_requested"] for t in report["traces"]}
    for row in fifo + lru_rows:  # every policy's call time over the same count: the blocks requested
        assert row["ns_per_block"] == pytest.approx(row["ns_per_op"] * row["calls"] / requested[row["trace"]])
        peer = next(r for r in lru_rows if (r["trace"], r["share"]) == (row["trace"], row["share"]))
        assert row["ns_per_block_ratio_to_lru"] == pytest.approx(row["ns_per_block"] / peer["ns_per_block"])
    assert summary["fifo"]["max_ns_per_block_ratio_to_lru"] == max(r["ns_per_block_ratio_to_lru"] for r in fifo)
    assert "every trace and capacity" in result.output
