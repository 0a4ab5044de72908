"""Benchmark paged decode attention: the ``paged`` C kernel vs the ``torch-sdpa`` backend's forward.

SmolLM2-like shapes (9 query heads, 3 key/value heads, head size 64, block size 16), one new token
per sequence after ``context`` cached ones, float32 and bfloat16. Both sides run a full forward
(write the new keys/values, then attend); ``paged`` also runs with ``threads=2``. The paged kernel's
effective bandwidth (bytes of keys and values it reads / time) is compared with a memory-bandwidth
probe timed the same way: ``torch.sum`` over a 256 MiB float32 tensor on one thread (the kernel's
default) and on all of torch's threads. Prints a table (median of --repeat calls after one warm-up)
and writes JSON to --out. With ``--window W`` every backend attends with a sliding window of ``W``
positions, and ``paged`` also runs without one (``paged full``): the window's saving at each
context, and the bandwidth over the keys and values the window reads.

    python csrc/benchmarks/bench_attention.py --out results.json
    python csrc/benchmarks/bench_attention.py --window 512
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs
import torch

import pyagent_kernels
from pyagent_attention_paged.backend import PagedAttention
from pyagent_attention_torch_sdpa.backend import TorchSdpaAttention
from pyagent_core.testing.attention import Shape, make_batch

HEADS, KV_HEADS, HEAD_SIZE, BLOCK_SIZE = 9, 3, 64, 16
CONTEXTS = (128, 512, 1024, 2048, 4096)
BATCHES = (1, 8, 32)
DTYPES = (torch.float32, torch.bfloat16)
PROBE_BYTES = 256 << 20


def time_ms(fn: Callable[[], object], repeat: int) -> float:
    """Median wall time of ``repeat`` calls after one warm-up, in milliseconds."""
    fn()
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def probe_gbps(repeat: int, threads: int) -> float:
    """Read bandwidth of ``torch.sum`` over a 256 MiB float32 tensor on ``threads`` threads, GB/s."""
    saved = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        data = torch.ones(PROBE_BYTES // 4)
        return PROBE_BYTES / time_ms(data.sum, repeat) / 1e6
    finally:
        torch.set_num_threads(saved)


def measure(dtype: torch.dtype, context: int, batch_size: int, repeat: int, window: int | None) -> dict[str, Any]:
    """Times of both backends on one decode batch, and the paged kernel's effective bandwidth."""
    batch = make_batch(Shape((context - 1,) * batch_size, (1,) * batch_size), block_size=BLOCK_SIZE,
                       num_heads=HEADS, num_kv_heads=KV_HEADS, head_size=HEAD_SIZE, dtype=dtype, seed=context)
    full = batch.context()
    cache, md, attention = batch.kv_cache, batch.metadata, attrs.evolve(full, sliding_windows=(window,))
    backends = {
        "paged": PagedAttention({"threads": 1}, attention),
        "paged_t2": PagedAttention({"threads": 2}, attention),
        "torch_sdpa": TorchSdpaAttention({"batch_invariant": True}, attention),
    }
    if window is not None:
        backends["paged_full"] = PagedAttention({"threads": 1}, full)
    row: dict[str, Any] = {"dtype": str(dtype).removeprefix("torch."), "context": context, "batch": batch_size,
                           "window": window}
    with torch.inference_mode():
        for name, backend in backends.items():
            row[f"{name}_ms"] = time_ms(lambda b=backend: b.forward(batch.q, batch.k, batch.v, cache, md, 0), repeat)
    read = context if window is None else min(context, window)
    kv_bytes = 2 * batch_size * read * KV_HEADS * HEAD_SIZE * batch.q.element_size()
    row["kv_mib"] = kv_bytes / 2**20
    row["paged_gbps"] = kv_bytes / row["paged_ms"] / 1e6
    row["sdpa_over_paged"] = row["torch_sdpa_ms"] / row["paged_ms"]
    return row


def main() -> None:
    """Run every configuration, print the table and write the JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5, help="timed calls per cell (median; default 5)")
    parser.add_argument("--out", type=Path, help="write the results as JSON here")
    parser.add_argument("--window", type=int, help="attend with a sliding window of this many positions")
    args = parser.parse_args()
    if args.window is not None and args.window < 1:
        parser.error(f"--window must be a positive number of positions, got {args.window}")
    probe = {
        "one_thread_gbps": probe_gbps(args.repeat, 1),
        "all_threads_gbps": probe_gbps(args.repeat, torch.get_num_threads()),
    }
    rows = [measure(dtype, context, batch_size, args.repeat, args.window)
            for dtype in DTYPES for context in CONTEXTS for batch_size in BATCHES]
    for row in rows:
        row["bw_vs_probe"] = row["paged_gbps"] / probe["one_thread_gbps"]
    full = args.window is not None
    header = (f"{'dtype':9} {'ctx':>5} {'batch':>5} {'KV MiB':>7} {'paged ms':>9} {'paged t2':>9} "
              f"{'sdpa ms':>9} {'sdpa/paged':>10} {'GB/s':>6} {'bw/probe':>8}"
              + (f" {'paged full':>10} {'full/paged':>10}" if full else ""))
    print(header if not full else f"sliding window {args.window}\n{header}")
    for r in rows:
        print(f"{r['dtype']:9} {r['context']:5d} {r['batch']:5d} {r['kv_mib']:7.1f} {r['paged_ms']:9.3f} "
              f"{r['paged_t2_ms']:9.3f} {r['torch_sdpa_ms']:9.3f} {r['sdpa_over_paged']:10.1f} "
              f"{r['paged_gbps']:6.1f} {r['bw_vs_probe']:8.2f}"
              + (f" {r['paged_full_ms']:10.3f} {r['paged_full_ms'] / r['paged_ms']:10.1f}" if full else ""))
    print(f"probe (torch.sum over 256 MiB float32): {probe['one_thread_gbps']:.1f} GB/s on one thread, "
          f"{probe['all_threads_gbps']:.1f} GB/s on {torch.get_num_threads()} threads")
    if args.out:
        meta = {"torch": torch.__version__, "torch_threads": torch.get_num_threads(),
                "machine": platform.machine(), "processor": platform.processor(),
                "kernels": pyagent_kernels.status()["isa"], "repeat": args.repeat, "window": args.window}
        args.out.write_text(json.dumps({"meta": meta, "probe": probe, "rows": rows}, indent=2) + "\n")


if __name__ == "__main__":
    main()
