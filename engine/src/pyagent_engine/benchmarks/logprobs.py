"""The benchmark behind ``pyagent bench logprobs``: what asking for logprobs costs a decode step.

On the embedded model, greedy batches of the engine benchmark's prompts generate a fixed number of
tokens (end-of-sequence ignored) without logprobs (the peer) and with ``logprobs`` of 0, 5 and 20
alternatives in each mode, on one engine per mode; configurations alternate and each keeps its
fastest of ``repeats`` runs. Decode tok/s counts the tokens after each request's first over the time
after the batch's first token, so prefill stays out of it; it is measured in wall-clock time and in
the process's CPU time (tokens per CPU second), which other load on a shared machine disturbs less,
most of all with ``threads=1``.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import attrs

from pyagent_engine.benchmarks.engine import PROMPTS


@attrs.frozen(kw_only=True)
class LogprobsBenchSettings:
    """What the benchmark runs.

    Attributes:
        batch_sizes: concurrent requests per run.
        ks: alternatives asked for, each a configuration (``None`` is the peer: no logprobs).
        new_tokens: tokens generated per request.
        repeats: runs per configuration (interleaved; the fastest counts).
        threads: torch threads (and so the model forward's) for the run; ``None``: torch's default.
    """

    batch_sizes: tuple[int, ...] = (1, 8)
    ks: tuple[int | None, ...] = (None, 0, 5, 20)
    new_tokens: int = 64
    repeats: int = 3
    threads: int | None = None


def _decode_tok_s(engine: Any, prompts: Sequence[list[int]], params: Any) -> tuple[float, float]:
    """Tokens after each request's first over the wall-clock and the CPU time after the batch's first token."""
    requests = [engine.add_request(ids, params) for ids in prompts]
    first: tuple[float, float] | None = None
    while engine.has_unfinished():
        engine.step()
        if first is None and all(r.output_token_ids for r in requests):
            first = time.perf_counter(), time.process_time()
    wall, cpu = time.perf_counter(), time.process_time()
    failed = [r.error for r in requests if r.error is not None]
    if failed:
        raise RuntimeError(f"pyagent request failed: {failed[0]}")
    assert first is not None
    tokens = sum(len(r.output_token_ids) - 1 for r in requests)
    return tokens / (wall - first[0]), tokens / (cpu - first[1])


def run_logprobs_benchmark(settings: LogprobsBenchSettings) -> dict[str, Any]:
    """Decode tok/s per batch size, mode and ``k``, with each ratio to the no-logprobs peer of the same engine."""
    import torch

    if settings.threads is not None:
        torch.set_num_threads(settings.threads)

    from pyagent_engine.api.llm import LLM
    from pyagent_engine.core.config import EngineConfig
    from pyagent_engine.core.engine import Engine
    from pyagent_engine.requests.params import SamplingParams

    llm = LLM()
    engines = {mode: Engine(llm.loaded, config=EngineConfig(logprobs_mode=mode)) for mode in ("raw", "processed")}
    prompts = [llm.encode(prompt, chat=True)[0] for prompt in PROMPTS]
    rows = []
    for batch in settings.batch_sizes:
        batch_prompts = [prompts[i % len(prompts)] for i in range(batch)]
        best: dict[tuple[str, int | None], tuple[float, float]] = {}
        for _ in range(settings.repeats):
            for mode, engine in engines.items():
                for k in settings.ks:
                    params = SamplingParams(max_tokens=settings.new_tokens, temperature=0.0, ignore_eos=True,
                                            logprobs=k)
                    wall, cpu = _decode_tok_s(engine, batch_prompts, params)
                    old_wall, old_cpu = best.get((mode, k), (0.0, 0.0))
                    best[mode, k] = max(old_wall, wall), max(old_cpu, cpu)
        for (mode, k), (wall, cpu) in best.items():
            peer_wall, peer_cpu = best[mode, None]
            rows.append({"batch": batch, "mode": mode, "logprobs": k, "decode_tok_s": wall,
                         "ratio_to_no_logprobs": wall / peer_wall, "decode_tok_per_cpu_s": cpu,
                         "cpu_ratio_to_no_logprobs": cpu / peer_cpu})
    llm.close()
    return {"new_tokens": settings.new_tokens, "repeats": settings.repeats, "torch_threads": torch.get_num_threads(),
            "results": rows}
