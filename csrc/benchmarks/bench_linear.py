"""Benchmark the linear kernel on SmolLM2-135M's layer shapes: float32, and quantized weights at both precisions.

Each shape (q/k/v fused, o_proj, gate/up fused, down; K-quants only where ``in`` is a multiple of 256)
is multiplied with ``--rows`` input rows by the C kernel: float32 weights, and random GGUF blocks of
each ``--formats`` entry at precision "exact" (decoded to their float values) and "int8" (int8
activations, integer dot products), on 1 and 2 threads; ``torch.matmul`` (not batch-invariant) runs the
float32 product as a peer. Prints the fastest of --repeat rounds (each round times --calls calls;
minimums resist the noise of a shared machine) in milliseconds and GFLOP/s, the bytes of weights each
precision reads next to the GGUF's, and int8's speed-up over exact; writes JSON to --out if given.
``--clock cpu`` times one-thread calls by the calling thread's CPU time instead of the wall clock (a
busy host's waits for a core then do not count; two-thread rows keep the wall clock). ``--isa`` runs the
C kernel on one instruction-set variant (they give the same bits; default: the best this CPU supports).

    python csrc/benchmarks/bench_linear.py --rows 1 --formats q4_1 q8_0 q4_k q6_k --out decode.json
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
from pyagent_kernels._int8_layout import GGUF_BLOCKS
from pyagent_kernels.linear import linear
from pyagent_kernels.quantized import QuantizedWeight

SHAPES = {"qkv": (960, 576), "o_proj": (576, 576), "gate_up": (3072, 576), "down": (576, 1536)}
THREADS = (1, 2)
#: Byte offsets of each GGUF block's float16 fields, set to small finite scales.
HALVES = {"q4_0": (0,), "q4_1": (0, 2), "q5_0": (0,), "q5_1": (0, 2), "q8_0": (0,), "q4_k": (0, 2),
          "q5_k": (0, 2), "q6_k": (208,)}


def best_ms(fn: Callable[[], object], calls: int, repeat: int, clock: Callable[[], float]) -> float:
    """The fastest round's time per call, in milliseconds (one warm-up call first)."""
    fn()
    best = float("inf")
    for _ in range(repeat):
        start = clock()
        for _ in range(calls):
            fn()
        best = min(best, (clock() - start) / calls)
    return best * 1e3


def gguf_weight(fmt: str, out: int, inner: int, seed: int) -> QuantizedWeight:
    """Random GGUF rows of ``fmt``: random code bytes, float16 scales near 1/64."""
    rng = np.random.default_rng(seed)
    _, weights, size = GGUF_BLOCKS[fmt]
    blocks = rng.integers(0, 256, size=(out, inner // weights, size), dtype=np.uint8)
    for offset in HALVES[fmt]:
        scales = (rng.uniform(0.5, 1.5, (out, inner // weights)) / 64).astype(np.float16)
        blocks[..., offset : offset + 2] = scales.view(np.uint8).reshape(out, inner // weights, 2)
    return QuantizedWeight.from_gguf(torch.from_numpy(blocks.reshape(out, -1)), fmt, inner)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=190, help="input rows (1: a decode step, more: a prefill)")
    parser.add_argument("--formats", nargs="+", default=["q4_1", "q8_0", "q4_k", "q6_k"], choices=sorted(GGUF_BLOCKS))
    parser.add_argument("--calls", type=int, default=5, help="calls per timed round")
    parser.add_argument("--repeat", type=int, default=7, help="timed rounds; the fastest counts")
    parser.add_argument("--clock", choices=("wall", "cpu"), default="wall", help="one-thread timing (see above)")
    parser.add_argument("--isa", choices=("generic", "avx2", "avx512"), help="C kernel variant (default: the best)")
    parser.add_argument("--out", type=Path, help="write the results as JSON here")
    args = parser.parse_args()
    isa = pyagent_kernels.set_isa(args.isa)
    status = pyagent_kernels.status()
    print(f"C kernel: {isa}, int8 dot product: {status['int8_dot']}, AMX: {status['amx']}; {platform.processor()}")
    gen = torch.Generator().manual_seed(0)
    results = []
    print(f"{'shape':<8} {'weights':<12} {'threads':>7} {'ms':>8} {'GFLOP/s':>8} {'MB read':>8} {'GGUF MB':>8}")
    for name, (out, inner) in SHAPES.items():
        x = torch.randn(args.rows, inner, generator=gen)
        dense = torch.randn(out, inner, generator=gen) / inner**0.5
        flop = 2 * args.rows * out * inner
        cases: list[tuple[str, int, int, int, Callable[[], object]]] = []  # kind, threads, bytes, GGUF bytes, call
        for threads in THREADS:
            cases.append(("f32", threads, dense.numel() * 4, 0,
                          lambda x=x, w=dense, t=threads: linear(x, w, threads=t, backend="c")))
        for fmt in args.formats:
            if inner % GGUF_BLOCKS[fmt][1]:
                continue
            weight = gguf_weight(fmt, out, inner, seed=out + inner)
            assert weight.gguf_parts is not None
            file_bytes = weight.gguf_parts[0][1].numel()
            read = {"exact": weight.packed.numel(), "int8": sum(rows.numel() for _, rows, _ in weight.int8_parts())}
            for precision, size in read.items():
                for threads in THREADS:
                    cases.append((f"{fmt} {precision}", threads, size, file_bytes,
                                  lambda x=x, w=weight, t=threads, p=precision: linear(x, w, threads=t, backend="c",
                                                                                      precision=p)))
        for threads in THREADS:
            def matmul(t: int = threads, x: torch.Tensor = x, dense: torch.Tensor = dense) -> object:
                torch.set_num_threads(t)
                return x @ dense.T
            cases.append(("torch", threads, dense.numel() * 4, 0, matmul))
        for kind, threads, size, file_bytes, fn in cases:
            clock = time.thread_time if args.clock == "cpu" and threads == 1 else time.perf_counter
            ms = best_ms(fn, args.calls, args.repeat, clock)
            results.append({"shape": name, "out": out, "in": inner, "rows": args.rows, "weights": kind,
                            "threads": threads, "ms": ms, "gflops": flop / ms / 1e6, "bytes_read": size,
                            "gguf_bytes": file_bytes or None,
                            "clock": "cpu" if clock is time.thread_time else "wall"})
            print(f"{name:<8} {kind:<12} {threads:>7} {ms:>8.3f} {flop / ms / 1e6:>8.1f} {size / 1e6:>8.2f} "
                  f"{(file_bytes / 1e6 if file_bytes else float('nan')):>8.2f}")
    speedups = [(a["shape"], a["weights"].split()[0], a["threads"], a["ms"] / b["ms"]) for a in results
                for b in results if a["weights"].endswith(" exact") and b["weights"] == a["weights"][:-6] + " int8"
                and (a["shape"], a["threads"]) == (b["shape"], b["threads"])]
    print("int8 over exact: " + ", ".join(f"{s} {f} t{t} {r:.2f}x" for s, f, t, r in speedups))
    if args.out is not None:
        args.out.write_text(json.dumps({"machine": platform.processor() or platform.machine(), "isa": isa,
                                        "int8_dot": status["int8_dot"], "amx": status["amx"],
                                        "results": results}, indent=2))


if __name__ == "__main__":
    main()
