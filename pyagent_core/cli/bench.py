"""``pyagent bench``: benchmarks that compare against a named peer in the same run.

``startup`` times a cold ``pyagent list --json`` (every installed plugin discovered and listed)
against ``python -c pass`` (the interpreter floor) and ``python -c "import torch"`` (what listing
would cost if it imported torch), each in a fresh process.
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
