"""``pyagent bench samplers``: the default sampler chain per generated token, three ways, one run.

The chain is penalties (repetition 1.1 over prompt + output), top-k 50, top-p 0.9, min-p 0.05,
temperature 0.8 (in that order, temperature last), then the token draw:

- ``c``: the pyagent samplers as the engine runs them, each selected by name through the registry
  (the ``penalties`` processor; the installed top_k / top_p / min_p / temperature processors, fused
  into one C kernel call by the chain where they implement ``FusableMaskStep``; the ``gumbel``
  selector, which looks only at the tokens the fused call recorded as kept), every kernel in C;
- ``torch``: the same objects with every kernel on its pure-torch fallback (bit-identical results);
- ``transformers`` (the peer): ``LogitsProcessorList([RepetitionPenalty, TopK, TopP, MinP,
  Temperature])`` and ``torch.multinomial`` over the softmax, as ``generate()`` does.

Each request starts with a 256-token prompt and 64 output tokens; every step appends one token per
row, so the penalties update their counts incrementally and transformers sees ``input_ids`` grow.
Logits are N(0, 2.5^2), restored before each step (not timed). Reported: median over steps of the
chain's time, per request row and per logit, and the ratios to ``c``.
"""

from __future__ import annotations

import platform
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

import torch

PARAMS: dict[str, Any] = {"repetition_penalty": 1.1, "top_k": 50, "top_p": 0.9, "min_p": 0.05, "temperature": 0.8}
PROMPT_TOKENS, OUTPUT_TOKENS = 256, 64
BATCHES = (1, 8, 32)
VOCABS = (49_152, 151_936)
GOAL_VOCAB, GOAL_US_PER_ROW, GOAL_RATIO = 49_152, 15.0, 10.0

Step = Callable[[torch.Tensor], torch.Tensor]


def _histories(rows: int, vocab: int, seed: int) -> list[tuple[list[int], list[int]]]:
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, vocab, (rows, PROMPT_TOKENS + OUTPUT_TOKENS), generator=gen).tolist()
    return [(row[:PROMPT_TOKENS], row[PROMPT_TOKENS:]) for row in ids]


def pyagent_chain(backend: str, rows: int, vocab: int) -> tuple[Step, Callable[[list[int]], None]]:
    """The pyagent chain with every kernel on ``backend``, built through the registry; returns
    (step, append tokens)."""
    from pyagent_core.interfaces.sampler import AddedRequest, BatchUpdate, SamplerContext
    from pyagent_core.kinds import SAMPLER
    from pyagent_core.registry import get_registry
    from pyagent_kernels.sampling import KeptTokens
    from pyagent_sampler_host.fused_mask import apply_processors

    registry, context = get_registry(), SamplerContext(vocab)

    def build(name: str, options: dict[str, Any] | None = None) -> Any:
        selection = registry.select(SAMPLER, name, options)
        return registry.load(selection.backend)(selection.options, context)

    penalties = build("penalties", {"backend": backend})
    masks = [build(name) for name in ("top_k", "top_p", "min_p", "temperature")]
    selector = build("gumbel", {"backend": backend})
    kept = KeptTokens()
    histories = _histories(rows, vocab, seed=1)
    added = tuple(AddedRequest(r, {**PARAMS, "seed": r}, prompt, output)
                  for r, (prompt, output) in enumerate(histories))
    for sampler in (penalties, *masks, selector):
        sampler.update_state(BatchUpdate(rows, added=added))

    def step(logits: torch.Tensor) -> torch.Tensor:
        logits = penalties.apply(logits)
        logits = apply_processors(masks, logits, backend=backend, kept=kept)
        return selector.select(logits, kept=kept)

    def append(tokens: list[int]) -> None:
        for request, token in zip(added, tokens, strict=True):
            request.output_token_ids.append(token)

    return step, append


def transformers_chain(rows: int, vocab: int) -> tuple[Step, Callable[[list[int]], None]]:
    """The peer: transformers' processors and multinomial sampling, with growing input_ids."""
    from transformers import (
        LogitsProcessorList,
        MinPLogitsWarper,
        RepetitionPenaltyLogitsProcessor,
        TemperatureLogitsWarper,
        TopKLogitsWarper,
        TopPLogitsWarper,
    )

    chain = LogitsProcessorList([
        RepetitionPenaltyLogitsProcessor(PARAMS["repetition_penalty"]), TopKLogitsWarper(PARAMS["top_k"]),
        TopPLogitsWarper(PARAMS["top_p"]), MinPLogitsWarper(PARAMS["min_p"]),
        TemperatureLogitsWarper(PARAMS["temperature"]),
    ])
    state = {"ids": torch.tensor([p + o for p, o in _histories(rows, vocab, seed=1)])}

    def step(logits: torch.Tensor) -> torch.Tensor:
        scores = chain(state["ids"], logits)  # type: ignore[arg-type]
        return torch.multinomial(scores.softmax(dim=-1), 1).squeeze(1)

    def append(tokens: list[int]) -> None:
        state["ids"] = torch.cat([state["ids"], torch.tensor(tokens).unsqueeze(1)], dim=1)

    return step, append


def _time_chain(step: Step, append: Callable[[list[int]], None], source: torch.Tensor, steps: int,
                warmup: int = 3) -> float:
    """Median seconds of one chain step over ``steps`` timed steps."""
    logits = torch.empty_like(source)
    times = []
    for index in range(warmup + steps):
        logits.copy_(source)
        start = time.perf_counter()
        tokens = step(logits)
        elapsed = time.perf_counter() - start
        append(tokens.tolist())
        if index >= warmup:
            times.append(elapsed)
    return statistics.median(times)


IMPLS = ("c", "torch", "transformers")


def run_samplers_benchmark(batches: Sequence[int] = BATCHES, vocabs: Sequence[int] = VOCABS,
                           steps: int = 20) -> dict[str, Any]:
    """Time every implementation on every (vocab, batch); return rows, ratios and the goal check."""
    import pyagent_kernels

    results: list[dict[str, Any]] = []
    for vocab in vocabs:
        for rows in batches:
            source = torch.randn(rows, vocab, generator=torch.Generator().manual_seed(rows)) * 2.5
            seconds = {}
            for impl in IMPLS:
                if impl == "transformers":
                    step, append = transformers_chain(rows, vocab)
                else:
                    step, append = pyagent_chain(impl, rows, vocab)
                seconds[impl] = _time_chain(step, append, source, steps)
            for impl in IMPLS:
                results.append({
                    "impl": impl, "vocab": vocab, "batch": rows, "ms_per_step": seconds[impl] * 1e3,
                    "us_per_row": seconds[impl] / rows * 1e6, "ns_per_logit": seconds[impl] / (rows * vocab) * 1e9,
                    "ratio_to_c": seconds[impl] / seconds["c"],
                })
    goal_rows = [r for r in results if r["impl"] == "c" and r["vocab"] == GOAL_VOCAB]
    goals: list[dict[str, Any]] = []
    for row in goal_rows:
        peer = next(r for r in results if r["impl"] == "transformers" and r["vocab"] == GOAL_VOCAB
                    and r["batch"] == row["batch"])
        goals.append({"batch": row["batch"], "us_per_row": row["us_per_row"], "ratio": peer["ratio_to_c"],
                      "met": row["us_per_row"] <= GOAL_US_PER_ROW and peer["ratio_to_c"] >= GOAL_RATIO})
    return {
        "benchmark": "samplers",
        "chain": "penalties, top_k, top_p, min_p, temperature, sample",
        "params": PARAMS,
        "history": {"prompt_tokens": PROMPT_TOKENS, "output_tokens": OUTPUT_TOKENS},
        "steps": steps,
        "torch_threads": torch.get_num_threads(),
        "kernels": pyagent_kernels.status(),
        "machine": platform.processor() or platform.machine(),
        "results": results,
        "goal": {"vocab": GOAL_VOCAB, "us_per_row": GOAL_US_PER_ROW, "ratio": GOAL_RATIO, "by_batch": goals},
    }
