"""Benchmark batched LoRA: the kernel (``pyagent_kernels.lora``) on SmolLM2-135M's shapes, and with
``--steps`` whole decode steps of the embedded SmolLM2-135M with and without adapters.

Kernel: the q/k/v and gate/up products, rows x adapters x rank, every row using adapter
``row % adapters`` on every slice. Peers in the same run: the kernel's torch fallback (one product
per row, batch-invariant), a grouped torch implementation (per adapter: gather its rows, two
matmuls, scale, scatter-add: SGMV in plain torch; not batch-invariant) and the base
product itself (the linear kernel on Q4_1 weights), which says what the LoRA delta adds to a step.
The C kernels run as prepared calls on fixed buffers, as the model's steps run them.

Steps: the model as the engine's loader reads it (Q4_1 blocks, float32 activations, the ``paged``
attention backend), ``--step-rows`` sequences of ``--context`` tokens, one decode step timed for: the
base model; LoRA enabled with every row on the base model (-1); the rows spread over
``--step-adapters`` adapters of rank 8 on q/v; the same over adapters of rank 16 on every linear
layer (random weights: the timing does not depend on them). With ``--llama-server``, the peer:
llama-server on the same GGUF with the first q/v adapter written as a llama.cpp LoRA GGUF
(``--lora``), one stream of ``--predict`` greedy tokens with the adapter's scale 0 (off) and 1 (on),
its reported decode speed (llama.cpp applies one adapter set to a whole batch, so only the
one-stream ratio compares; run ``--step-rows 1 --step-adapters 1`` for ours).

Times are the fastest of --repeat rounds of --calls calls, with the ratios, the CPU model and ISA
flags; --out writes JSON.

    python csrc/benchmarks/bench_lora.py --out /tmp/bench_lora.json
    python csrc/benchmarks/bench_lora.py --rows --steps --step-rows 1 --step-adapters 1 \
        --llama-server /path/to/llama-server
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from bench_linear import best_ms  # this folder's scripts share it

import pyagent_kernels
from pyagent_core.interfaces.lora import LoRASettings
from pyagent_core.interfaces.model import ModelContext
from pyagent_core.kinds import ATTENTION
from pyagent_core.registry import Registry
from pyagent_core.testing.model import metadata, random_adapter
from pyagent_engine.models import loader
from pyagent_kernels import run_prepared
from pyagent_kernels.linear import prepare_linear
from pyagent_kernels.lora import LoRAStack, prepare_lora
from pyagent_kernels.quantized import QuantizedWeight
from pyagent_model_base.lora.gguf_adapter import write_gguf_adapter

#: name -> (in_features, slice sizes) of SmolLM2-135M's fused products.
SHAPES = {"qkv": (576, [576, 192, 192]), "gate_up": (576, [1536, 1536])}
#: Tokens per KV-cache block of the decode steps.
BLOCK = 16


def cpu() -> dict[str, str]:
    """The CPU model and the ISA flags that matter here (Linux /proc/cpuinfo)."""
    model, flags = platform.processor() or platform.machine(), ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name") and model in ("", platform.machine()):
                model = line.split(":", 1)[1].strip()
            if line.startswith("flags"):
                present = set(line.split(":", 1)[1].split())
                flags = " ".join(f for f in ("avx2", "fma", "avx512f", "avx512bw", "avx512_bf16", "amx_tile")
                                 if f in present)
                break
    except OSError:
        pass
    return {"model": model, "flags": flags}


def q4_1_weight(out: int, inner: int, seed: int) -> QuantizedWeight:
    """Random Q4_1 rows: float16 scale and minimum, random 4-bit codes."""
    rng = np.random.default_rng(seed)
    blocks = rng.integers(0, 256, size=(out, inner // 32, 20), dtype=np.uint8)
    scales = (rng.uniform(0.5, 1.5, (out, inner // 32, 2)) / 64).astype(np.float16)
    blocks[..., :4] = scales.view(np.uint8).reshape(out, inner // 32, 4)
    return QuantizedWeight.from_gguf(torch.from_numpy(blocks.reshape(out, -1)), "q4_1", inner)


def grouped_torch(x: torch.Tensor, y: torch.Tensor, slots: torch.Tensor, stack: LoRAStack) -> None:
    """The delta per adapter group with batched torch products (SGMV in plain torch)."""
    bounds = stack.starts.tolist()
    for slot in slots.unique().tolist():
        if slot < 0:
            continue
        rows = (slots == slot).nonzero().squeeze(1)
        picked = x.index_select(0, rows)
        for k in range(stack.slices):
            rank = int(stack.ranks[slot, k])
            if rank:
                u = picked @ stack.a[slot, k, :rank].T
                delta = (u @ stack.b[slot, :rank, bounds[k] : bounds[k + 1]]) * float(stack.scales[slot, k])
                y[:, bounds[k] : bounds[k + 1]].index_add_(0, rows, delta)


def kernel(args: argparse.Namespace) -> list[dict[str, Any]]:
    """The kernel's table: ms per call of each implementation."""
    gen = torch.Generator().manual_seed(0)
    results = []
    header = (f"{'shape':<8} {'rows':>5} {'adapt':>5} {'rank':>4} {'c ms':>8} {'fallback':>9} {'grouped':>8} "
              f"{'base ms':>8} {'fb/c':>6} {'grp/c':>6} {'c/base':>6}")
    print(header)
    for name, (inner, sizes) in SHAPES.items():
        base = q4_1_weight(sum(sizes), inner, seed=inner + len(sizes))
        for rows in args.rows:
            x = torch.randn(rows, inner, generator=gen)
            y = torch.zeros(rows, sum(sizes))
            base_call = [prepare_linear(x, base, torch.empty(rows, sum(sizes)), threads=args.threads, backend="c")]
            base_ms = best_ms(lambda calls=base_call: run_prepared(calls), args.calls, args.repeat)
            for adapters in args.adapters:
                slots = (torch.arange(rows) % adapters).to(torch.int32)
                for rank in args.ranks:
                    stack = LoRAStack(adapters, rank, inner, sizes)
                    for slot in range(adapters):
                        for k, size in enumerate(sizes):
                            stack.load(slot, k, torch.randn(rank, inner, generator=gen) / inner**0.5,
                                       torch.randn(size, rank, generator=gen) / rank**0.5, 2.0 / rank)
                    c_call = [prepare_lora(x, y, slots, stack, threads=args.threads, backend="c")]
                    fallback = [prepare_lora(x, y, slots, stack, backend="torch")]
                    timed = {
                        "c": lambda calls=c_call: run_prepared(calls),
                        "fallback": lambda calls=fallback: run_prepared(calls),
                        "grouped": lambda x=x, y=y, s=slots, st=stack: grouped_torch(x, y, s, st),
                    }
                    ms = {kind: best_ms(fn, args.calls, args.repeat) for kind, fn in timed.items()}
                    row = {"shape": name, "rows": rows, "adapters": adapters, "rank": rank, **{f"{k}_ms": v
                           for k, v in ms.items()}, "base_ms": base_ms}
                    results.append(row)
                    print(f"{name:<8} {rows:>5} {adapters:>5} {rank:>4} {ms['c']:>8.3f} {ms['fallback']:>9.3f} "
                          f"{ms['grouped']:>8.3f} {base_ms:>8.3f} {ms['fallback'] / ms['c']:>6.1f} "
                          f"{ms['grouped'] / ms['c']:>6.1f} {ms['c'] / base_ms:>6.2f}")
    return results


def step_times(model: Any, args: argparse.Namespace, adapters: dict[str, list[Any]]) -> dict[str, float]:
    """Milliseconds per decode step for each configuration."""
    config = model.config
    registry = Registry().load_plugins()
    paged = registry.select(ATTENTION, "paged")
    attention = registry.load(paged.backend)(paged.options, type(model).attention_context(config, BLOCK, "float32"))
    rows, context = args.step_rows, args.context
    per_row = -(-(context + 1) // BLOCK)
    tables = [list(range(r * per_row, (r + 1) * per_row)) for r in range(rows)]
    caches = [torch.zeros(2, rows * per_row, BLOCK, config.num_kv_heads, config.head_dim)
              for _ in range(config.num_layers)]
    generator = torch.Generator().manual_seed(0)
    prompt = torch.randint(config.vocab_size, (rows * context,), generator=generator)
    model.forward(prompt, torch.arange(context).repeat(rows), caches, metadata(tables, [0] * rows, [context] * rows,
                                                                              BLOCK), attention, torch.tensor([0]))
    step = metadata(tables, [context] * rows, [1] * rows, BLOCK)
    tokens, positions, last = prompt[:rows], torch.full((rows,), context), torch.arange(rows)

    def decode(slots: torch.Tensor | None) -> Callable[[], object]:
        return lambda: model.forward(tokens, positions, caches, step, attention, last, lora_slots=slots)

    times = {"base": best_ms(decode(None), args.calls, args.repeat)}
    model.enable_lora(LoRASettings(max_loras=args.step_adapters, max_lora_rank=16))
    times["lora on, rows -1"] = best_ms(decode(torch.full((rows,), -1)), args.calls, args.repeat)
    spread = torch.arange(rows) % args.step_adapters
    for name, loaded in adapters.items():
        for slot, adapter in enumerate(loaded):
            model.load_lora(slot, adapter)
        times[name] = best_ms(decode(spread), args.calls, args.repeat)
    return times


def llama_server(binary: Path, model_path: Path, adapter: Path, args: argparse.Namespace) -> dict[str, float]:
    """llama-server's decode tokens/s for one stream with the adapter off and on."""
    port = 18000 + int(time.time()) % 1000
    server = subprocess.Popen([str(binary), "-m", str(model_path), "--lora", str(adapter), "--lora-init-without-apply",
                               "--port", str(port), "-t", str(torch.get_num_threads()), "-c", "2048", "-np", "1",
                               "--no-webui"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(600):
            try:
                with urllib.request.urlopen(f"{url}/health", timeout=1) as reply:
                    if reply.status == 200:
                        break
            except OSError:
                time.sleep(0.5)
        speeds = {}
        for name, scale in (("llama.cpp lora off", 0.0), ("llama.cpp lora on", 1.0)):
            best = 0.0
            for _ in range(args.repeat):
                body = {"prompt": "The history of the city begins", "n_predict": args.predict, "temperature": 0,
                        "cache_prompt": False, "ignore_eos": True, "lora": [{"id": 0, "scale": scale}]}
                request = urllib.request.Request(f"{url}/completion", json.dumps(body).encode(),
                                                 {"Content-Type": "application/json"})
                with urllib.request.urlopen(request, timeout=600) as reply:
                    best = max(best, json.load(reply)["timings"]["predicted_per_second"])
            speeds[name] = best
        return speeds
    finally:
        server.terminate()
        server.wait(timeout=30)


def steps(args: argparse.Namespace) -> dict[str, Any]:
    """Decode steps of the embedded model, and llama-server's one-stream speeds with --llama-server."""
    path = loader.resolve_model_path(None)
    checkpoint = loader.read_model(path)[0]
    cls = checkpoint.architecture.model_class
    model = cls({}, ModelContext(config=checkpoint.config, weights=checkpoint.weights, dtype="float32"))
    targets = cls.lora_targets(checkpoint.config)
    count = args.step_adapters
    adapters = {f"{count} adapters r8 q/v": [random_adapter(targets, 8, seed, only=("q_proj", "v_proj"))
                                            for seed in range(count)],
                f"{count} adapters r16 all": [random_adapter(targets, 16, seed) for seed in range(count)]}
    print(f"decode steps: {args.step_rows} rows x {args.context} tokens of context, rows over {count} adapters")
    times = step_times(model, args, adapters)
    for name, ms in times.items():
        print(f"pyagent {name:<28} {ms:8.2f} ms/step  {ms / times['base']:5.2f}x base")
    found: dict[str, Any] = {"rows": args.step_rows, "context": args.context, "pyagent_ms": times}
    if args.llama_server is not None:
        with tempfile.TemporaryDirectory() as folder:
            adapter = Path(folder) / "qv.gguf"
            write_gguf_adapter(adapters[f"{count} adapters r8 q/v"][0], adapter, gguf_arch="llama",
                               gguf_names=cls.gguf_tensor_names(checkpoint.config),
                               permuted_heads=cls.gguf_permuted_heads(checkpoint.config))
            speeds = llama_server(args.llama_server, path, adapter, args)
        found["llama_server_tok_s"] = speeds
        off, on = speeds["llama.cpp lora off"], speeds["llama.cpp lora on"]
        print(f"llama-server one stream: {off:.1f} tok/s off, {on:.1f} tok/s with the r8 q/v adapter "
              f"({off / on:.2f}x the time per token)")
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, nargs="*", default=[1, 8, 64, 256], help="kernel: input rows (none: "
                        "skip the kernel table)")
    parser.add_argument("--adapters", type=int, nargs="+", default=[1, 4], help="kernel: adapters the rows use")
    parser.add_argument("--ranks", type=int, nargs="+", default=[8, 16, 64], help="kernel: adapter ranks")
    parser.add_argument("--steps", action="store_true", help="also time decode steps of the embedded model")
    parser.add_argument("--step-rows", type=int, default=8, help="steps: sequences per decode step")
    parser.add_argument("--step-adapters", type=int, default=4, help="steps: adapters the sequences are spread over")
    parser.add_argument("--context", type=int, default=64, help="steps: tokens of each sequence before the step")
    parser.add_argument("--predict", type=int, default=64, help="steps: tokens per llama-server request")
    parser.add_argument("--llama-server", type=Path, help="steps: llama-server binary for the peer")
    parser.add_argument("--threads", type=int, default=2, help="threads of the C kernels, torch and llama.cpp")
    parser.add_argument("--calls", type=int, default=5, help="calls per timed round")
    parser.add_argument("--repeat", type=int, default=7, help="timed rounds; the fastest counts")
    parser.add_argument("--out", type=Path, help="write the results as JSON here")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    machine = cpu()
    isa = pyagent_kernels.status()["isa"]
    print(f"CPU: {machine['model']} ({machine['flags']}); C kernel: {isa}; threads {args.threads}; torch "
          f"{torch.__version__}")
    results: dict[str, Any] = {"cpu": machine, "isa": isa, "threads": args.threads}
    if args.rows:
        results["kernel"] = kernel(args)
    if args.steps:
        results["steps"] = steps(args)
    if args.out is not None:
        args.out.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
