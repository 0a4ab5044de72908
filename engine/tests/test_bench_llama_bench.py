"""The llama-bench peer of ``pyagent bench engine --llama-bench``: its JSON read into pp/tg rows, and
every way it can be unavailable reported instead of raised. A stand-in script prints what llama-bench
prints (``-o json``: one record per test); timings never go in unit tests."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

from pyagent_engine.benchmarks.engine import pp_tg_ratios
from pyagent_engine.benchmarks.llama_bench import PpTgSettings, run_llama_bench

RECORD = {"build_commit": "abc1234", "build_number": 7000, "cpu_info": "AMD EPYC", "backends": "CPU",
          "model_type": "llama ?B Q4_K - Medium", "n_threads": 2, "avg_ns": 1, "stddev_ns": 0}
RECORDS = [{**RECORD, "n_prompt": 512, "n_gen": 0, "avg_ts": 480.5, "samples_ts": [480.0, 481.0]},
           {**RECORD, "n_prompt": 0, "n_gen": 128, "avg_ts": 160.5, "samples_ts": [160.0, 161.0]}]


def fake_llama_bench(tmp_path: Path, stdout: str, status: int = 0) -> Path:
    """An executable that records its arguments, prints ``stdout`` and exits with ``status``."""
    script = tmp_path / "llama-bench"
    argv_file = str(tmp_path / "argv.json")
    script.write_text(f"#!{sys.executable}\nimport json, pathlib, sys\n"
                      f"pathlib.Path({argv_file!r}).write_text(json.dumps(sys.argv[1:]))\n"
                      f"sys.stdout.write({stdout!r})\nsys.stderr.write('last line of the error\\n')\n"
                      f"sys.exit({status})\n")
    script.chmod(0o755)
    return script


def test_records_become_pp_and_tg_rows(tmp_path: Path) -> None:
    settings = PpTgSettings(binary=fake_llama_bench(tmp_path, json.dumps(RECORDS)), threads=2, repetitions=4)
    row, reason = run_llama_bench(settings, tmp_path / "m.gguf")
    assert reason is None and row is not None
    assert json.loads((tmp_path / "argv.json").read_text()) == [
        "-m", str(tmp_path / "m.gguf"), "-p", "512", "-n", "128", "-t", "2", "-r", "4", "-o", "json"]
    assert (row["pp_tok_s"], row["tg_tok_s"], row["pp_runs"], row["threads"]) == (480.5, 160.5, [480.0, 481.0], 2)
    assert row["engine"] == "llama.cpp" and row["build"] == "7000 (abc1234)"
    ours = {"engine": "pyagent", "dtype": "float32", "precision": "int8", "pp_tok_s": 961.0, "tg_tok_s": 80.25}
    exact = {**ours, "precision": "exact", "pp_tok_s": 240.25, "tg_tok_s": 321.0}
    ratios = pp_tg_ratios([exact, ours, row], settings, "float32", "int8")  # the default precision first
    assert [(r["name"], r["ratio"], r["met"]) for r in ratios] == [
        ("pp512: pyagent float32 int8 / llama-bench", 2.0, True),
        ("tg128: pyagent float32 int8 / llama-bench", 0.5, False),
        ("pp512: pyagent float32 exact / llama-bench", 0.5, False),
        ("tg128: pyagent float32 exact / llama-bench", 2.0, True)]
    assert [r["ratio"] for r in pp_tg_ratios([ours], settings, "float32", "int8")] == [None, None]


@pytest.mark.parametrize(("stdout", "status", "reason"), [
    ("", 1, "llama-bench failed (last line of the error)"),
    ("not json", 0, "llama-bench printed no pp and tg results as JSON"),
    (json.dumps(RECORDS[:1]), 0, "llama-bench printed no pp and tg results as JSON"),
])
def test_a_failing_llama_bench_is_an_unavailable_peer(tmp_path: Path, stdout: str, status: int, reason: str) -> None:
    row, why = run_llama_bench(PpTgSettings(binary=fake_llama_bench(tmp_path, stdout, status)), tmp_path / "m.gguf")
    assert row is None and why is not None and why.startswith(reason)


def test_a_missing_binary_says_what_to_pass(tmp_path: Path) -> None:
    row, why = run_llama_bench(PpTgSettings(binary=tmp_path / "nowhere"), tmp_path / "m.gguf")
    assert row is None and why == f"{tmp_path / 'nowhere'} does not exist; pass the path of llama.cpp's llama-bench"


def test_llama_bench_needs_a_gguf_model(cli, tmp_path: Path) -> None:
    """llama-bench reads GGUFs only: a checkpoint folder with --llama-bench is refused before any run."""
    result = cli("bench", "engine", "--quick", "--model", str(tmp_path), "--llama-bench", str(tmp_path / "llama-bench"))
    message = re.sub(r"[\s│]+", " ", result.stderr)  # rich wraps it in a box
    assert result.returncode != 0 and "Traceback" not in message
    assert "is not a .gguf file; llama-bench and pyagent must read the same GGUF" in message
