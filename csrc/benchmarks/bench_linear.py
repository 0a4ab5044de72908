"""Benchmark the batch-invariant linear kernel on SmolLM2-135M's layer shapes (prefill).

Each shape (q/k/v fused, o_proj, gate/up fused, down) is multiplied with ``--rows`` input rows by
the C kernel, with float32 weights and with Q8_0 weights (random blocks), float32 inputs, on 1 and 2
threads; ``torch.matmul`` (not batch-invariant) runs the float32 product as a peer. Prints a table of
the fastest of --repeat rounds (each round times --calls calls; minimums resist the noise of a shared
machine) in milliseconds and GFLOP/s, and writes JSON to --out if given. ``--isa`` runs the C kernel
on one instruction-set variant (they give the same bits; the default is the best this CPU supports).

    python csrc/benchmarks/bench_linear.py --rows 190 --out results.json
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

import pyagent_kernels
from pyagent_kernels.linear import linear
from pyagent_kernels.quantized import QuantizedWeight

SHAPES = {"qkv": (960, 576), "o_proj": (576, 576), "gate_up": (3072, 576), "down": (576, 1536)}
THREADS = (1, 2)


def best_ms(fn: Callable[[], object], calls: int, repeat: int) -> float:
    """The fastest round's time per call, in milliseconds (one warm-up call first)."""
    fn()
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        best = min(best, (time.perf_counter() - start) / calls)
    return best * 1e3


def q8_0_weight(out: int, inner: int, seed: int) -> QuantizedWeight:
    """Random Q8_0 rows: float16 scales near 1/64 and random int8 codes."""
    rng = np.random.default_rng(seed)
    blocks = rng.integers(0, 256, size=(out, inner // 32, 34), dtype=np.uint8)
    scales = (rng.uniform(0.5, 1.5, (out, inner // 32)) / 64).astype(np.float16)
    blocks[..., :2] = scales.view(np.uint8).reshape(out, inner // 32, 2)
    return QuantizedWeight.from_gguf(torch.from_numpy(blocks.reshape(out, -1)), "q8_0", inner)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=190, help="input rows (prompt tokens)")
    parser.add_argument("--calls", type=int, default=5, help="calls per timed round")
    parser.add_argument("--repeat", type=int, default=7, help="timed rounds; the fastest counts")
    parser.add_argument("--isa", choices=("generic", "avx2", "avx512"), help="C kernel variant (default: the best)")
    parser.add_argument("--out", type=Path, help="write the results as JSON here")
    args = parser.parse_args()
    isa = pyagent_kernels.set_isa(args.isa)
    print(f"C kernel: {isa}")
    gen = torch.Generator().manual_seed(0)
    results = []
    print(f"{'shape':<8} {'weights':<8} {'threads':>7} {'ms':>8} {'GFLOP/s':>8}")
    for name, (out, inner) in SHAPES.items():
        x = torch.randn(args.rows, inner, generator=gen)
        dense = torch.randn(out, inner, generator=gen) / inner**0.5
        weights = {"f32": dense, "q8_0": q8_0_weight(out, inner, seed=out + inner)}
        flop = 2 * args.rows * out * inner
        cases: list[tuple[str, int, Callable[[], object]]] = []
        for kind, weight in weights.items():
            for threads in THREADS:
                cases.append((kind, threads, lambda x=x, w=weight, t=threads: linear(x, w, threads=t, backend="c")))
        for threads in THREADS:
            def matmul(t: int = threads, x: torch.Tensor = x, dense: torch.Tensor = dense) -> object:
                torch.set_num_threads(t)
                return x @ dense.T
            cases.append(("torch", threads, matmul))
        for kind, threads, fn in cases:
            ms = best_ms(fn, args.calls, args.repeat)
            results.append({"shape": name, "out": out, "in": inner, "rows": args.rows, "weights": kind,
                            "threads": threads, "ms": ms, "gflops": flop / ms / 1e6})
            print(f"{name:<8} {kind:<8} {threads:>7} {ms:>8.3f} {flop / ms / 1e6:>8.1f}")
    if args.out is not None:
        args.out.write_text(json.dumps({"machine": platform.processor() or platform.machine(), "isa": isa,
                                        "results": results}, indent=2))


if __name__ == "__main__":
    main()
