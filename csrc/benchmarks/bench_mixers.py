"""Benchmark the mixer kernels' decode step: C (``pyagent_kernels.mixers``) vs its torch fallback.

One layer's decode step (one new token per sequence after 511 cached ones) at published models' sizes:
the short convolution of Qwen3-Next's Gated DeltaNet (8192 channels, width 4), Mamba2-130m's scan (24
heads of 64, state 128), Qwen3-Next's gated delta rule (16 key heads of 128, 32 value heads of 128)
and DeepSeek-V2-Lite's latent attention (16 heads, nope 128, rope 64, latent 512, values 128, over
512 positions); float32, batches of 1 and 8. Both sides run the same call on the same tensors
(``backend="c"`` and ``backend="torch"``); the C side also with ``threads=2``. Prefill rows compare
the C kernel walking 256 and 1024 new tokens one by one with the ``torch`` mixer backend's chunked
scan of the same tokens (chunks of 64), the choice ``recurrent_below`` makes. Prints a table (median of --repeat
calls after one warm-up) with the CPU model and ISA flags, and writes JSON to --out.

    python csrc/benchmarks/bench_mixers.py --out results.json
"""

from __future__ import annotations

import argparse
import json
import platform
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from bench_attention import time_ms  # this folder's scripts share it

import pyagent_kernels
from pyagent_kernels.mixers import MixerBatch

CONTEXT, PREFILLS = 511, (256, 1024)


def cpu() -> dict[str, str]:
    """The CPU model and the ISA flags the kernels care about, from /proc/cpuinfo."""
    model, flags = platform.processor(), ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name") and model in ("", platform.processor()):
                model = line.split(":", 1)[1].strip()
            if line.startswith("flags") and not flags:
                present = set(line.split(":", 1)[1].split())
                flags = " ".join(f for f in ("avx2", "fma", "avx512f", "avx512bw", "avx512_bf16", "amx_tile")
                                 if f in present)
    except OSError:
        pass
    return {"model": model, "flags": flags}


def decode_batch(size: int) -> MixerBatch:
    """``size`` sequences, one new token each after :data:`CONTEXT` cached ones, slots 0.."""
    return MixerBatch(query_start_loc=torch.arange(size + 1, dtype=torch.int32),
                      seq_lens=torch.full((size,), CONTEXT + 1, dtype=torch.int32),
                      state_slots=torch.arange(size), block_tables=torch.arange(size * 32, dtype=torch.int32)
                      .view(size, 32), slot_mapping=torch.arange(size) * 512 + CONTEXT)


def calls(size: int, tokens: int, gen: torch.Generator) -> dict[str, Callable[[str, int], torch.Tensor]]:
    """Each family's call on random tensors of its model's sizes (``tokens`` new tokens in all)."""
    batch = decode_batch(size)

    def randn(*shape: int, scale: float = 1.0) -> torch.Tensor:
        return scale * torch.randn(*shape, generator=gen)

    conv = (randn(tokens, 8192), randn(8192, 4, scale=0.5), randn(8192, scale=0.1), randn(size, 8192, 3))
    ssd = (randn(tokens, 24, 64), randn(tokens, 24), -torch.rand(24, generator=gen), randn(tokens, 1, 128, scale=0.1),
           randn(tokens, 1, 128, scale=0.1), randn(24), randn(24), randn(size, 24, 64, 128))
    delta = (F.normalize(randn(tokens, 16, 128), dim=-1), F.normalize(randn(tokens, 16, 128), dim=-1),
             randn(tokens, 32, 128), -F.softplus(randn(tokens, 32)), torch.rand(tokens, 32, generator=gen),
             randn(size, 32, 128, 128, scale=0.1))
    mla = (randn(tokens, 16, 128), randn(tokens, 16, 64), randn(tokens, 512), randn(tokens, 64),
           randn(16, 128, 512, scale=0.05), randn(16, 128, 512, scale=0.05), randn(size * 32, 16, 576))
    return {
        "short_conv": lambda backend, threads: batch.short_conv(*conv, activation="silu", backend=backend,
                                                                threads=threads),
        "ssd": lambda backend, threads: batch.ssd(*ssd, backend=backend, threads=threads),
        "gated_delta": lambda backend, threads: batch.gated_delta(*delta, scale=128**-0.5, backend=backend,
                                                                  threads=threads),
        "mla": lambda backend, threads: batch.mla(*mla, scale=192**-0.5, backend=backend, threads=threads),
    }


def prefill_cases(tokens: int, chunked: Any) -> dict[str, tuple[Callable[[int], object], Callable[[], object]]]:
    """The scan and the delta rule over ``tokens`` new tokens of one fresh sequence: ``(C call on threads,
    the chunked backend's call)`` each."""
    from pyagent_core.interfaces.attention import AttentionMetadata

    gen = torch.Generator().manual_seed(tokens)
    q, k = (F.normalize(torch.randn(tokens, 16, 128, generator=gen), dim=-1) for _ in range(2))
    v, g = torch.randn(tokens, 32, 128, generator=gen), -F.softplus(torch.randn(tokens, 32, generator=gen))
    beta = torch.rand(tokens, 32, generator=gen)
    ssd = (torch.randn(tokens, 24, 64, generator=gen), torch.randn(tokens, 24, generator=gen),
           -torch.rand(24, generator=gen), 0.1 * torch.randn(tokens, 1, 128, generator=gen),
           0.1 * torch.randn(tokens, 1, 128, generator=gen), torch.randn(24, generator=gen),
           torch.randn(24, generator=gen))
    batch = MixerBatch(query_start_loc=torch.tensor([0, tokens], dtype=torch.int32),
                       seq_lens=torch.tensor([tokens], dtype=torch.int32), state_slots=torch.tensor([0]))
    metadata = AttentionMetadata(block_tables=torch.zeros(1, 1, dtype=torch.int32),
                                 slot_mapping=torch.zeros(tokens, dtype=torch.int64), seq_lens=batch.seq_lens,
                                 query_start_loc=batch.query_start_loc, max_query_len=tokens, max_seq_len=tokens,
                                 state_slots=batch.state_slots)
    delta_state, ssd_state = torch.zeros(1, 32, 128, 128), torch.zeros(1, 24, 64, 128)
    return {
        "gated_delta prefill": (
            lambda threads: batch.gated_delta(q, k, v, g, beta, delta_state, scale=128**-0.5, backend="c",
                                              threads=threads),
            lambda: chunked.gated_delta(q, k, v, g, beta, delta_state, metadata, 0, 128**-0.5)),
        "ssd prefill": (lambda threads: batch.ssd(*ssd, ssd_state, backend="c", threads=threads),
                        lambda: chunked.ssd(*ssd, ssd_state, metadata, 0)),
    }


def prefill_rows(repeat: int) -> list[dict[str, Any]]:
    """The C kernel over :data:`PREFILLS` new tokens vs the ``torch`` backend's chunked scan (chunks of 64)."""
    from pyagent_core.interfaces.mixer import MixerContext
    from pyagent_mixers.backend import TorchMixer

    chunked = TorchMixer({"chunk_size": 64, "recurrent_below": 1}, MixerContext(dtype="float32", block_size=16))
    rows = []
    for tokens in PREFILLS:
        for family, (c_call, torch_call) in prefill_cases(tokens, chunked).items():
            rows.append({"family": family, "batch": 1, "tokens": tokens,
                         "c_ms": time_ms(lambda c=c_call: c(1), repeat),
                         "c_t2_ms": time_ms(lambda c=c_call: c(2), repeat),
                         "torch_ms": time_ms(torch_call, repeat)})
    return rows


def main() -> None:
    """Run every configuration, print the table and write the JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5, help="timed calls per cell (median; default 5)")
    parser.add_argument("--out", type=Path, help="write the results as JSON here")
    args = parser.parse_args()
    rows = []
    with torch.inference_mode():
        for size in (1, 8):
            for family, call in calls(size, size, torch.Generator().manual_seed(size)).items():
                rows.append({"family": family, "batch": size, "tokens": size,
                             "c_ms": time_ms(lambda c=call: c("c", 1), args.repeat),
                             "c_t2_ms": time_ms(lambda c=call: c("c", 2), args.repeat),
                             "torch_ms": time_ms(lambda c=call: c("torch", 1), args.repeat)})
        rows += prefill_rows(args.repeat)
    machine = cpu()
    print(f"CPU: {machine['model']} ({machine['flags']}); kernels {pyagent_kernels.status()['isa']}, "
          f"torch {torch.__version__} on {torch.get_num_threads()} threads")
    print(f"{'family':20} {'batch':>5} {'tokens':>6} {'C ms':>8} {'C t2 ms':>8} {'torch ms':>9} {'torch/C':>8}")
    for r in rows:
        r["torch_over_c"] = r["torch_ms"] / r["c_ms"]
        print(f"{r['family']:20} {r['batch']:5d} {r['tokens']:6d} {r['c_ms']:8.3f} {r['c_t2_ms']:8.3f} "
              f"{r['torch_ms']:9.3f} {r['torch_over_c']:8.1f}")
    if args.out:
        meta = {"cpu": machine, "torch": torch.__version__, "torch_threads": torch.get_num_threads(),
                "kernels": pyagent_kernels.status()["isa"], "repeat": args.repeat}
        args.out.write_text(json.dumps({"meta": meta, "rows": rows}, indent=2) + "\n")


if __name__ == "__main__":
    main()
