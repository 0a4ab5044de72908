"""The LoRA benchmark behind ``pyagent bench lora``: multi-adapter throughput against the base model, in one run.

On the embedded SmolLM2-135M-Instruct (or ``--model``), ``adapters`` random LoRA adapters (rank
``rank`` on ``targets``, non-zero weights, seeded) are written as llama.cpp LoRA GGUF files, so pyagent
and llama-server read the very same files. pyagent (``LLM.generate`` in this process, ``max_num_seqs =
streams``, every request submitted at once, greedy, ``max_tokens`` each, end of sequence ignored):

- output tok/s of ``streams`` concurrent streams on the base model, over ``adapters`` adapters (stream
  ``i`` on adapter ``i % adapters``, every adapter in its own slot, all in the same steps), and all on
  one adapter; each round runs the three back to back (each of them first in turn), the median of
  ``rounds`` rounds is reported, and the median over the rounds of each run's ratio to the base run of
  its round (a shared machine's load drifts between rounds more than within one; issue 31's goal:
  >= 0.8 over 4 adapters at 8 streams);
- adapter load time: reading and checking a file (``add_lora``) and copying it into a slot
  (``load_lora``), the median over the adapters.

With ``llama_server`` (the binary), llama.cpp's server on the same GGUF model with ``streams`` slots is
measured by the same closed loop as ``pyagent bench serve`` (``/v1/completions``, after a warm-up
round of 2-token requests), without and with ``--lora`` on the first adapter file (llama-server
applies a ``--lora`` adapter to every request: its one-adapter case), one run each, and its ratio
sits beside pyagent's one-adapter ratio.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import attrs

from pyagent_engine.benchmarks.engine import PROMPTS
from pyagent_engine.benchmarks.serve import (
    ServeBenchSettings,
    free_port,
    host_info,
    llama_server_argv,
    run_level,
    running_server,
)

TARGETS = {"qv": ("q_proj", "v_proj"), "all": ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj",
                                                 "down_proj")}
"""``--targets`` choices: the projections the random adapters adapt."""


@attrs.frozen(kw_only=True)
class LoRABenchSettings:
    """What one run measures.

    Attributes:
        model: a GGUF file (``None``: the embedded model); llama-server needs a GGUF.
        streams: concurrent requests.
        adapters: random adapters, each in its own slot (``max_loras``).
        rank: their rank (``max_lora_rank``).
        targets: the projections they adapt (a key of :data:`TARGETS`).
        max_tokens: tokens generated per request.
        rounds: rounds of the three pyagent runs; the median is reported.
        llama_server: llama.cpp's ``llama-server`` binary (``None``: no peer).
        seed: the random adapters' seed.
    """

    model: str | None = None
    streams: int = 8
    adapters: int = 4
    rank: int = 8
    targets: str = "qv"
    max_tokens: int = 64
    rounds: int = 5
    llama_server: Path | None = None
    seed: int = 0


def random_adapters(model: Any, config: Any, settings: LoRABenchSettings, folder: Path) -> list[Path]:
    """Write ``settings.adapters`` random adapters for ``model`` as llama.cpp LoRA GGUFs in ``folder``."""
    import gguf
    import torch

    from pyagent_core.interfaces.lora import LoRAAdapter, LoRAWeight
    from pyagent_model_base.lora.gguf_adapter import write_gguf_adapter

    cls = type(model)
    generator = torch.Generator().manual_seed(settings.seed)
    targets = TARGETS[settings.targets]
    rank = settings.rank
    paths = []
    for index in range(settings.adapters):
        weights = {}
        for name, (rows, columns) in cls.lora_targets(config).items():
            if name.split(".")[-2] in targets:
                a = torch.randn(rank, columns, generator=generator) / columns**0.5
                b = torch.randn(rows, rank, generator=generator) * 0.2 / rank**0.5
                weights[name] = LoRAWeight(a, b, 2.0)
        path = folder / f"adapter{index}.gguf"
        write_gguf_adapter(LoRAAdapter(path.name, str(path), "gguf", weights), path,
                           gguf_arch=gguf.MODEL_ARCH_NAMES[cls.gguf_arch], gguf_names=cls.gguf_tensor_names(config),
                           permuted_heads=cls.gguf_permuted_heads(config))
        paths.append(path)
    return paths


def _load_times(llm: Any, paths: Sequence[Path]) -> dict[str, float]:
    """Register every adapter; the median milliseconds to read one and to copy one into a slot."""
    from pyagent_engine.requests.lora import LoRARequest

    read, copy = [], []
    model = llm.loaded.model
    for index, path in enumerate(paths):
        start = time.perf_counter()
        llm.add_lora(LoRARequest(path.stem, index + 1, str(path)))
        read.append(time.perf_counter() - start)
        served = llm.engine.loras.by_name[path.stem]
        start = time.perf_counter()
        model.load_lora(index, served.adapter)
        copy.append(time.perf_counter() - start)
        model.unload_lora(index)  # the engine's slot table loads it when a request needs it
    return {"read_ms": 1e3 * statistics.median(read), "slot_copy_ms": 1e3 * statistics.median(copy)}


def _throughput(llm: Any, prompts: Sequence[list[int]], params: Any, adapters: Sequence[str | None]) -> float:
    """Output tok/s of ``prompts`` submitted at once, prompt ``i`` on ``adapters[i]``."""
    start = time.perf_counter()
    outputs = llm.generate(list(prompts), params, lora_request=list(adapters))
    wall = time.perf_counter() - start
    failed = [o.error for o in outputs if o.error is not None]
    if failed:
        raise RuntimeError(f"benchmark requests failed: {failed[:2]}")
    return sum(len(o.output_token_ids) for o in outputs) / wall


def pyagent_figures(settings: LoRABenchSettings, paths: Sequence[Path], llm: Any) -> dict[str, Any]:
    """pyagent's load times and the median throughput of the base, multi-adapter and one-adapter runs."""
    from pyagent_engine.requests.params import SamplingParams

    names = [path.stem for path in paths]
    loads = _load_times(llm, paths)
    encoded = [llm.encode(p, chat=llm.loaded.chat_template is not None)[0] for p in PROMPTS]
    prompts = [encoded[i % len(encoded)] for i in range(settings.streams)]
    params = SamplingParams(max_tokens=settings.max_tokens, temperature=0.0, ignore_eos=True)
    runs: dict[str, list[str | None]] = {
        "base": [None] * settings.streams,
        f"{len(names)} adapters": [names[i % len(names)] for i in range(settings.streams)],
        "1 adapter": [names[0]] * settings.streams,
    }
    warm = SamplingParams(max_tokens=2, temperature=0.0, ignore_eos=True)
    llm.generate([encoded[0]] * (len(names) + 1), warm, lora_request=[None, *names])  # slots loaded, plans built
    rates: dict[str, list[float]] = {name: [] for name in runs}
    order = list(runs)
    for index in range(settings.rounds):
        for name in order[index % len(order):] + order[:index % len(order)]:  # each run first in turn
            rates[name].append(_throughput(llm, prompts, params, runs[name]))
    base = rates["base"]
    return {"load": loads, "tok_s": {name: statistics.median(values) for name, values in rates.items()},
            "rounds": rates, "prompt_tokens": [len(p) for p in prompts],
            "ratios": {name: statistics.median(v / b for v, b in zip(values, base, strict=True))
                       for name, values in rates.items() if name != "base"}}


def llama_server_figures(settings: LoRABenchSettings, gguf: Path, adapter: Path) -> dict[str, Any]:
    """llama-server's output tok/s at ``streams`` concurrent streams, without and with ``--lora adapter``."""
    assert settings.llama_server is not None
    load = ServeBenchSettings(concurrency=(settings.streams,), max_tokens=settings.max_tokens, rounds=2,
                              min_requests=settings.streams, endpoint="completions")
    warm = attrs.evolve(load, max_tokens=2, rounds=1)
    prompts = list(PROMPTS)
    figures = {}
    for name, extra in (("base", ()), ("1 adapter", ("--lora", str(adapter)))):
        port = free_port()
        argv = llama_server_argv(settings.llama_server, gguf, port, settings.streams, load.ctx_per_slot, extra)
        with running_server(f"llama-server ({name})", argv, port) as url:
            run_level(url, "model", prompts, settings.streams, warm)  # the weights paged in, every slot used once
            summary, _ = run_level(url, "model", prompts, settings.streams, load)
        if summary["failed"]:
            raise RuntimeError(f"llama-server ({name}) requests failed: {summary['errors']}")
        figures[name] = summary["output_tok_s"]
    return {"tok_s": figures, "ratio_1_adapter": figures["1 adapter"] / figures["base"]}


def run_lora_benchmark(settings: LoRABenchSettings) -> dict[str, Any]:
    """The whole run: adapters written, pyagent measured, llama-server measured when given; the report."""
    from pyagent_engine.api.llm import LLM
    from pyagent_engine.core.config import EngineConfig
    from pyagent_engine.models.embedded import find_embedded_gguf
    from pyagent_kernels import status

    llm = LLM(settings.model, enable_lora=True, max_loras=settings.adapters, max_lora_rank=settings.rank,
              config=EngineConfig(max_num_seqs=settings.streams))
    kernels = status()
    report: dict[str, Any] = {"settings": {**attrs.asdict(settings), "llama_server": str(settings.llama_server)},
                              "host": {**host_info(), "isa": kernels["isa"], "int8_dot": kernels["int8_dot"]},
                              "precision": llm.loaded.precision}
    try:
        with tempfile.TemporaryDirectory(prefix="pyagent-bench-lora-") as folder:
            paths = random_adapters(llm.loaded.model, llm.loaded.config, settings, Path(folder))
            report["pyagent"] = pyagent_figures(settings, paths, llm)
            llm.close()
            if settings.llama_server is not None:
                gguf = Path(settings.model) if settings.model else find_embedded_gguf()
                if gguf is None or gguf.suffix != ".gguf":
                    report["llama_server"] = {"skipped": "llama-server needs a GGUF model"}
                else:
                    report["llama_server"] = llama_server_figures(settings, gguf, paths[0])
    finally:
        llm.close()
    return report
