"""``pyagent bench``: benchmarks that compare against a named peer in the same run.

``startup`` times a cold ``pyagent list --json`` (every installed plugin discovered and listed)
against ``python -c pass`` (the interpreter floor) and ``python -c "import torch"`` (what listing
would cost if it imported torch), each in a fresh process.

``engine`` measures generation on the embedded model against Hugging Face transformers (and
llama.cpp when it is installed); the measuring lives in :mod:`pyagent_core.bench_engine`.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Annotated, Any

import typer

from pyagent_core.cli.output import print_json, print_table

app = typer.Typer(help="Benchmarks against a named peer, reported as ratios.", no_args_is_help=True)


def _time_command(argv: list[str], repeat: int) -> list[float]:
    runs = []
    for _ in range(repeat):
        start = time.perf_counter()
        subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        runs.append(time.perf_counter() - start)
    return runs


@app.command("startup")
def startup(
    repeat: Annotated[int, typer.Option(min=1, help="Runs per command (the median is reported).")] = 10,
    out: Annotated[Path | None, typer.Option(help="Write the results as JSON to this file.")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")] = False,
) -> None:
    """Cold-start wall time of `pyagent list --json` against `python -c pass` and `import torch`."""
    python = sys.executable
    pyagent = str(Path(python).with_name("pyagent"))
    if not os.path.exists(pyagent):
        pyagent_argv = [python, "-m", "pyagent_core.cli", "list", "--json"]
    else:
        pyagent_argv = [pyagent, "list", "--json"]
    commands = {
        "python -c pass": [python, "-c", "pass"],
        "pyagent list --json": pyagent_argv,
        "python -c 'import torch'": [python, "-c", "import torch"],
    }
    _time_command(commands["pyagent list --json"], 1)  # warm the file system cache once
    results: dict[str, dict[str, Any]] = {}
    for label, argv in commands.items():
        runs = _time_command(argv, repeat)
        results[label] = {"median_s": statistics.median(runs), "min_s": min(runs), "runs": runs}
    listing = results["pyagent list --json"]["median_s"]
    report = {
        "benchmark": "startup",
        "repeat": repeat,
        "results": results,
        "ratio_list_to_python": listing / results["python -c pass"]["median_s"],
        "ratio_list_to_import_torch": listing / results["python -c 'import torch'"]["median_s"],
    }
    if out:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(report, indent=2), encoding="utf-8")
    if json_out:
        print_json(report)
        return
    print_table(
        f"cold start, median of {repeat} runs", ["command", "median ms", "min ms", "vs pyagent list"],
        [(label, f"{r['median_s'] * 1e3:.1f}", f"{r['min_s'] * 1e3:.1f}", f"{r['median_s'] / listing:.2f}x")
         for label, r in results.items()],
    )


def _number(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _print_engine_report(report: dict[str, Any]) -> None:
    tokens = report["prompt_tokens"]
    print_table(
        f"single stream, greedy, {report['new_tokens']} new tokens, median of {len(tokens)} prompts "
        f"({min(tokens)}-{max(tokens)} prompt tokens), {report['torch_threads']} torch threads",
        ["engine", "dtype", "attention", "prefill tok/s", "decode tok/s", "ttft ms"],
        [(r["engine"], r["dtype"], r.get("attention", ""), _number(r["prefill_tok_s"]), _number(r["decode_tok_s"]),
          _number(r["ttft_s"] * 1e3)) for r in report["single_stream"]]
        + [(name, "", "", info["reason"], "", "") for name, info in report["peers"].items() if not info["available"]],
    )
    print_table(
        f"pyagent aggregate, {report['aggregate_new_tokens']} new tokens per request",
        ["concurrent requests", "dtype", "attention", "output tokens", "wall s", "output tok/s"],
        [(r["concurrency"], r["dtype"], r["attention"], r["output_tokens"], _number(r["wall_s"], 2),
          _number(r["tok_s"])) for r in report["aggregate"]],
    )
    print_table(
        "ratios", ["ratio", "value", "goal", "met"],
        [(r["name"], "-" if r["ratio"] is None else f"{r['ratio']:.2f}x",
          "" if r["goal"] is None else f">= {r['goal']:g}x", "-" if r["met"] is None else "yes" if r["met"] else "no")
         for r in report["ratios"]],
    )


@app.command("engine")
def engine(
    dtype: Annotated[list[str] | None, typer.Option(
        help="pyagent single-stream dtype (repeat for several; default: bfloat16 and float32).")] = None,
    attention: Annotated[str | None, typer.Option(
        help="pyagent's attention backend (default: the registry's selection).")] = None,
    quick: Annotated[bool, typer.Option("--quick", help="One prompt and a few tokens: a smoke test.")] = False,
    out: Annotated[Path | None, typer.Option(help="Write the results as JSON to this file.")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON instead of tables.")] = False,
) -> None:
    """Generation speed of pyagent against transformers `generate()` (and llama.cpp when installed)."""
    from pyagent_core.bench_engine import DTYPES, EngineBenchSettings, run_engine_benchmark

    dtypes = tuple(dtype or DTYPES)
    unknown = sorted(set(dtypes) - set(DTYPES))
    if unknown:
        raise typer.BadParameter(f"unknown dtype {', '.join(unknown)}; choose from {', '.join(DTYPES)}",
                                 param_hint="--dtype")
    settings = (EngineBenchSettings.quick(dtypes, attention) if quick
                else EngineBenchSettings(dtypes=dtypes, attention=attention))
    report = run_engine_benchmark(settings)
    if out:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(report, indent=2), encoding="utf-8")
    if json_out:
        print_json(report)
        return
    _print_engine_report(report)
