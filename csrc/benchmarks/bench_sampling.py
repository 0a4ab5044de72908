"""Benchmark the fused sampling mask: C kernel vs its pure-torch fallback vs a naive full-sort peer.

The naive peer chains the transformers-style warpers (temperature, TopK via torch.topk, TopP via a
full sort + softmax + cumsum + scatter, MinP via softmax), the usual way to do this in torch.
Prints a table (best of --repeat calls) with ratios and writes the numbers as JSON to --out.

    python csrc/benchmarks/bench_sampling.py --out results.json
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import torch

import pyagent_kernels
from pyagent_kernels import Backend
from pyagent_kernels.sampling import apply_sampling_mask

Params = dict[str, torch.Tensor]
CONFIGS: dict[str, dict[str, float]] = {
    "t0.8 k50 p0.9": {"temperature": 0.8, "top_k": 50, "top_p": 0.9},
    "p0.95": {"top_p": 0.95},
    "t0.7 p0.9 minp0.05": {"temperature": 0.7, "top_p": 0.9, "min_p": 0.05},
}


def naive_full_sort(logits: torch.Tensor, params: Params) -> None:
    """transformers-style warpers, in place: temperature, top-k, top-p (full sort), min-p."""
    neg_inf = float("-inf")
    if "temperature" in params:
        logits.div_(params["temperature"].unsqueeze(1))
    if "top_k" in params:
        k = int(params["top_k"].max())
        kth = torch.topk(logits, k, dim=-1).values[:, -1:]
        logits.masked_fill_(logits < kth, neg_inf)
    if "top_p" in params:
        sorted_logits, sorted_indices = torch.sort(logits, descending=False)
        cumulative = sorted_logits.softmax(dim=-1).cumsum(dim=-1)
        remove = cumulative <= (1 - params["top_p"].unsqueeze(1))
        remove[:, -1] = False
        logits.masked_fill_(remove.scatter(1, sorted_indices, remove), neg_inf)
    if "min_p" in params:
        probs = logits.softmax(dim=-1)
        limit = params["min_p"].unsqueeze(1) * probs.amax(dim=-1, keepdim=True)
        logits.masked_fill_(probs < limit, neg_inf)


def fused(backend: Backend, threads: int = 1) -> Callable[[torch.Tensor, Params], None]:
    """apply_sampling_mask with the given backend and threads, as a (logits, params) callable."""

    def run(logits: torch.Tensor, params: Params) -> None:
        """Mask ``logits`` in place with ``params``."""
        apply_sampling_mask(
            logits,
            temperature=params.get("temperature"),
            top_k=params.get("top_k"),
            top_p=params.get("top_p"),
            min_p=params.get("min_p"),
            backend=backend,
            threads=threads,
        )

    return run


IMPLS: dict[str, Callable[[torch.Tensor, Params], None]] = {
    "c": fused("c"),
    "c_threads": fused("c", threads=torch.get_num_threads()),
    "torch_fallback": fused("torch"),
    "naive_full_sort": naive_full_sort,
}
HEADER = (
    f"{'config':<20} {'vocab':>6} {'rows':>4} {'c ms':>8} {'c mt ms':>8} {'fallback ms':>11} {'naive ms':>9} "
    f"{'fallback/c':>10} {'naive/c':>8}"
)


def time_ms(
    fn: Callable[[torch.Tensor, Params], None], logits: torch.Tensor, params: Params, repeat: int
) -> dict[str, float]:
    """Best and median wall time (ms) of fn over `repeat` back-to-back calls on fresh copies, after
    one warm-up call. The table uses the best, which other work on a shared machine disturbs least."""
    times = []
    work = logits.clone()
    for i in range(repeat + 1):
        work.copy_(logits)
        start = time.perf_counter()
        fn(work, params)
        if i:
            times.append((time.perf_counter() - start) * 1e3)
    return {"best": min(times), "median": statistics.median(times)}


def make_params(config: dict[str, float], rows: int) -> Params:
    """Per-row parameter tensors holding the config's values."""
    return {
        name: torch.full((rows,), value, dtype=torch.int32 if name == "top_k" else torch.float32)
        for name, value in config.items()
    }


def run_case(config_name: str, vocab: int, rows: int, scale: float, repeat: int) -> dict[str, object]:
    """Time every implementation on one case (after checking C and fallback agree)."""
    gen = torch.Generator().manual_seed(rows * vocab)
    logits = torch.randn(rows, vocab, generator=gen) * scale
    params = make_params(CONFIGS[config_name], rows)
    by_c, by_torch = logits.clone(), logits.clone()
    IMPLS["c"](by_c, params)
    IMPLS["torch_fallback"](by_torch, params)
    if not torch.equal(by_c, by_torch):
        raise SystemExit(f"{config_name} vocab={vocab} rows={rows}: C kernel and torch fallback disagree")
    timings = {name: time_ms(fn, logits, params, repeat) for name, fn in IMPLS.items()}
    ms = {name: timing["best"] for name, timing in timings.items()}
    print(
        f"{config_name:<20} {vocab:>6} {rows:>4} {ms['c']:>8.3f} {ms['c_threads']:>8.3f} "
        f"{ms['torch_fallback']:>11.2f} "
        f"{ms['naive_full_sort']:>9.2f} {ms['torch_fallback'] / ms['c']:>10.1f} "
        f"{ms['naive_full_sort'] / ms['c']:>8.1f}"
    )
    return {
        "config": config_name,
        "vocab": vocab,
        "rows": rows,
        **{f"{name}_ms": value for name, value in ms.items()},
        **{f"{name}_median_ms": timing["median"] for name, timing in timings.items()},
        "fallback_over_c": ms["torch_fallback"] / ms["c"],
        "naive_over_c": ms["naive_full_sort"] / ms["c"],
        "kept_mean": float(torch.isfinite(by_c).sum(dim=1).float().mean()),
    }


def main() -> None:
    """Run every config x vocab x rows case, print the table, write the JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="where to write the JSON results")
    parser.add_argument("--vocab", type=int, nargs="+", default=[49152, 128256])
    parser.add_argument("--rows", type=int, nargs="+", default=[1, 4, 16, 64])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--scale", type=float, default=2.5, help="logits ~ N(0, scale^2)")
    args = parser.parse_args()
    status = pyagent_kernels.status()
    if not status["compiled"]:
        raise SystemExit(f"the C extension is not built: {status['reason']}")
    print(HEADER)
    results = [
        run_case(config_name, vocab, rows, args.scale, args.repeat)
        for config_name in CONFIGS
        for vocab in args.vocab
        for rows in args.rows
    ]
    meta = {
        "machine": platform.machine(),
        "processor": platform.processor(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(),
        "isa": status["isa"],
        "logits": f"N(0, {args.scale}^2)",
        "repeat": args.repeat,
        "timing": "*_ms: best of `repeat` calls, *_median_ms: median; c: one thread, "
        "c_threads: threads=torch_threads",
    }
    args.out.write_text(json.dumps({"meta": meta, "results": results}, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
