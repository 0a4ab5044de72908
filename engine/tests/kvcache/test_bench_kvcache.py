"""``pyagent bench kvcache`` on a small trace: table, JSON file, and errors without tracebacks."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from pyagent_core.cli import full_app


def small_trace(tmp_path: Path) -> Path:
    lines = [{"hash_ids": [0, 1, 2]}, {"hash_ids": [0, 3]}, {"hash_ids": [0, 1, 2, 4]}, {"hash_ids": [0, 3, 5]}] * 3
    path = tmp_path / "trace.jsonl"
    path.write_text("\n".join(json.dumps(line) for line in lines), encoding="utf-8")
    return path


def test_bench_kvcache_writes_json_with_min_and_gap(tmp_path: Path) -> None:
    out = tmp_path / "report.json"
    result = CliRunner().invoke(full_app(), ["bench", "kvcache", "--trace", str(small_trace(tmp_path)),
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
    bad = CliRunner().invoke(full_app(), ["bench", "kvcache", "--trace", str(small_trace(tmp_path)), "--capacity", "0"])
    assert bad.exit_code != 0 and "positive block counts" in bad.output
