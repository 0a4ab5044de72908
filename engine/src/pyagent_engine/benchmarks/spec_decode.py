"""``pyagent bench spec-decode``: speculative decoding against no speculation and against transformers.

On the embedded SmolLM2-135M-Instruct, greedy, for each workload (a few prompts of each Spec-Bench
category in ``../shared/data/specbench`` plus a code-editing workload whose prompts ask to rewrite or
fix a given piece of code) and batch size B: the workload's prompts, cycled to a multiple of B that
covers each at least once, run in waves of B requests submitted together (so batch 1 runs every
prompt, one after the other). Requests stop at end of sequence or at the workload's token limit:
``max_tokens`` for the Spec-Bench categories, ``code_editing_max_tokens`` for code editing, whose
answers (the whole edited code) would otherwise be cut to their first lines:

- pyagent without speculation and with each proposer: wall time, output tokens, steps, mean
  accepted length, acceptance rate, proposer microseconds per step and per drafted request;
  speedup = time without / time with speculation (greedy outputs are identical, so both produce
  the same tokens; the benchmark checks it). Each configuration runs ``repeats`` times, in an
  order rotated between rounds, and the speedup is the median over rounds of the ratio within a
  round (runs seconds apart see the same machine load); the fastest time of each is reported too;
- the modelled speedup: the same ratio with every step's time taken from the verify-cost curve
  below at that step's token count - free of the run-to-run noise of a shared machine, and exactly
  what the steps and their sizes are worth on the measured cost curve;
- the verify cost: the time of a decode step whose requests each carry k draft tokens (all
  rejected), over the time of a plain decode step (k = 0), at every batch size - the price of
  verifying k tokens that speculation must earn back;
- the peer, Hugging Face transformers ``generate()`` at batch 1 on the same token ids, without and
  with ``prompt_lookup_num_tokens`` (its prompt-lookup decoding): its own speedup.

Heavy imports happen inside the functions. The report says how many prompts and tokens it used so
a run can be repeated.
"""

from __future__ import annotations

import importlib.util
import itertools
import json
import os
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import attrs

from pyagent_engine.benchmarks.code_editing import CODE_EDITING
from pyagent_engine.benchmarks.shared_data import SHARED_DATA

SPECBENCH = SHARED_DATA / "specbench" / "question.jsonl"

@attrs.frozen(kw_only=True)
class SpecBenchSettings:
    """What the benchmark runs."""

    proposers: tuple[str, ...] = ("ngram", "suffix")
    batch_sizes: tuple[int, ...] = (1, 8)
    prompts_per_workload: int = 2
    max_tokens: int = 64
    code_editing_max_tokens: int = 256
    num_draft_tokens: int = 8
    categories: tuple[str, ...] | None = None
    peer: bool = True
    repeats: int = 2
    verify_draft_tokens: tuple[int, ...] = (1, 2, 3, 4, 6, 8)

    def tokens_for(self, workload: str) -> int:
        """The most tokens a request of ``workload`` generates: code-editing answers are the edited
        code, so they get room to finish it (the complete answers of the six prompts are 42 to 206
        tokens, one runs on); open-ended Spec-Bench answers are cut at ``max_tokens``."""
        return self.code_editing_max_tokens if workload == "code_editing" else self.max_tokens


def workloads(settings: SpecBenchSettings) -> dict[str, list[str]]:
    """Prompts per workload: the first questions of each Spec-Bench category, then code editing."""
    chosen: dict[str, list[str]] = {}
    if SPECBENCH.exists():
        for line in SPECBENCH.read_text(encoding="utf-8").splitlines():
            record = json.loads(line)
            category = record["category"]
            if settings.categories is not None and category not in settings.categories:
                continue
            prompts = chosen.setdefault(category, [])
            if len(prompts) < settings.prompts_per_workload:
                prompts.append(record["turns"][0])
    if settings.categories is None or "code_editing" in settings.categories:
        chosen["code_editing"] = list(CODE_EDITING[: settings.prompts_per_workload])
    return chosen


def _waves(prompts: Sequence[list[int]], batch: int) -> list[list[list[int]]]:
    """The prompts cycled to a multiple of ``batch`` covering each once, in waves of ``batch``."""
    count = batch * -(-len(prompts) // batch)
    cycled = [prompts[i % len(prompts)] for i in range(count)]
    return [cycled[i:i + batch] for i in range(0, count, batch)]


@attrs.frozen
class _Run:
    """One timed run: wall seconds, every request's output, the tokens of every step, speculation stats."""

    seconds: float
    outputs: list[list[int]]
    step_tokens: list[int]
    stats: dict[str, Any]


def _run(engine: Any, waves: Sequence[Sequence[list[int]]], max_tokens: int) -> _Run:
    """Run the waves one after the other on ``engine``."""
    from pyagent_engine.requests.params import SamplingParams

    params = SamplingParams(max_tokens=max_tokens, temperature=0.0)
    outputs = []
    step_tokens: list[int] = []
    forward = engine.forward.run

    def counted(inputs: Any) -> Any:
        step_tokens.append(sum(c.num_tokens for c in inputs.chunks))
        return forward(inputs)

    engine.forward.run = counted
    try:
        started = time.perf_counter()
        for wave in waves:
            requests = [engine.add_request(ids, params) for ids in wave]
            while engine.has_unfinished():
                engine.step()
            outputs += [list(r.output_token_ids) for r in requests]
        elapsed = time.perf_counter() - started
    finally:
        del engine.forward.run  # no cycle through the wrapper: the engine's KV cache is freed at once
    return _Run(elapsed, outputs, step_tokens, engine.speculative.stats.as_dict() if engine.speculative else {})


class CostCurve:
    """Step time by tokens per step, from the verify-cost measurements (interpolated, extrapolated
    along the last segment): the model behind the benchmark's modelled speedup."""

    def __init__(self, points: Sequence[tuple[int, float]]) -> None:
        merged: dict[int, list[float]] = {}
        for tokens, seconds in points:
            merged.setdefault(tokens, []).append(seconds)
        self.points = sorted((t, sum(v) / len(v)) for t, v in merged.items())

    def __call__(self, tokens: int) -> float:
        """The modelled time of a step of ``tokens`` tokens."""
        points = self.points
        if len(points) == 1:
            return points[0][1] * tokens / points[0][0]
        for (t0, c0), (t1, c1) in itertools.pairwise(points):
            if tokens <= t1 or (t1, c1) == points[-1]:
                return max(c0 + (c1 - c0) * (tokens - t0) / (t1 - t0), 0.0)
        return points[-1][1]


def _pyagent_rows(loaded: Any, name: str, prompts: list[list[int]], settings: SpecBenchSettings,
                  curve: CostCurve | None) -> list[dict]:
    import statistics

    from pyagent_engine.core.engine import Engine
    from pyagent_engine.spec.config import SpeculativeConfig

    rows = []
    configs: list[str | None] = [None, *settings.proposers]
    for batch in settings.batch_sizes:
        waves = _waves(prompts, batch)
        runs: dict[str | None, list[_Run]] = {c: [] for c in configs}
        for repeat in range(settings.repeats):
            for proposer in configs[repeat % len(configs):] + configs[:repeat % len(configs)]:  # rotated order
                speculative = None if proposer is None else SpeculativeConfig(
                    proposer=proposer, num_draft_tokens=settings.num_draft_tokens)
                runs[proposer].append(_run(Engine(loaded, speculative=speculative), waves, settings.tokens_for(name)))
        base = runs[None]
        for proposer in settings.proposers:
            spec = runs[proposer]
            stats = spec[-1].stats
            calls, drafts = stats.get("num_proposer_calls") or 0, stats.get("num_drafts") or 0
            modelled = None
            if curve is not None:
                modelled = sum(map(curve, base[-1].step_tokens)) / sum(map(curve, spec[-1].step_tokens))
            rows.append({
                "workload": name, "batch": batch, "proposer": proposer, "requests": len(base[0].outputs),
                "output_tokens": sum(len(o) for o in base[0].outputs),
                "baseline_s": min(r.seconds for r in base), "spec_s": min(r.seconds for r in spec),
                "speedup": statistics.median(b.seconds / s.seconds for b, s in zip(base, spec, strict=True)),
                "modelled_speedup": modelled, "steps": len(spec[-1].step_tokens),
                "baseline_steps": len(base[-1].step_tokens),
                "identical": all(r.outputs == base[0].outputs for r in base + spec),
                "mean_accepted_length": stats.get("mean_accepted_length"),
                "acceptance_rate": stats.get("acceptance_rate"),
                "drafts_per_step": drafts / calls if calls else None,
                "proposer_us_per_step": stats.get("proposer_us_per_call"),
                "proposer_us_per_draft": 1e6 * stats["proposer_time_s"] / drafts if drafts else None,
            })
    return rows


def verify_costs(loaded: Any, prompt: list[int], settings: SpecBenchSettings, steps: int = 12) -> list[dict[str, Any]]:
    """Median decode-step time with k draft tokens per request (all rejected) over k = 0, per batch size."""
    import statistics

    from pyagent_core.interfaces.proposer import DraftTree, Proposer, ProposerRequest
    from pyagent_engine.core.engine import Engine
    from pyagent_engine.requests.params import SamplingParams
    from pyagent_engine.spec.config import SpeculativeConfig

    class Rejected(Proposer):
        """Drafts k copies of a token the model is not going to choose (id 0, a control token)."""

        def propose(self, requests: Sequence[ProposerRequest], max_tokens: int) -> list[DraftTree | None]:
            count = min(self.options["k"], max_tokens)
            return [DraftTree.chain([0] * count) if count else None for _ in requests]

    rows = []
    params = SamplingParams(max_tokens=steps + max(settings.verify_draft_tokens, default=0) + 2, temperature=0.0,
                            ignore_eos=True)  # room for every draft until the last timed step
    for batch in settings.batch_sizes:
        times: dict[int, float] = {}
        for _ in range(settings.repeats):
            for k in (0, *settings.verify_draft_tokens):
                engine = Engine(loaded, speculative=SpeculativeConfig(
                    proposer="ngram", num_draft_tokens=max(k, 1), adaptive=False))
                assert engine.speculative is not None
                engine.speculative.proposer = Rejected({"k": k}, engine.speculative.proposer.context)
                for _ in range(batch):
                    engine.add_request(prompt, params)
                engine.step()  # the prefill
                step_times = []
                for _ in range(steps):
                    started = time.perf_counter()
                    engine.step()
                    step_times.append(time.perf_counter() - started)
                times[k] = min(times.get(k, float("inf")), statistics.median(step_times))
        rows += [{"batch": batch, "draft_tokens": k, "step_ms": 1e3 * t, "ratio": t / times[0]}
                 for k, t in times.items()]
    return rows


def _hf_model(gguf: Path) -> Any:
    os.environ["HF_HUB_OFFLINE"] = "1"  # the GGUF is local; never reach for the hub
    import torch
    import transformers

    transformers.logging.set_verbosity_error()
    transformers.logging.disable_progress_bar()
    with tempfile.TemporaryDirectory() as folder:
        (Path(folder) / gguf.name).symlink_to(gguf)
        model = transformers.AutoModelForCausalLM.from_pretrained(folder, gguf_file=gguf.name, dtype=torch.bfloat16)
    return model.eval()


def _hf_rows(model: Any, name: str, prompts: list[list[int]], max_tokens: int) -> dict[str, Any]:
    import torch

    pad = model.generation_config.eos_token_id
    pad = pad[0] if isinstance(pad, list) else pad
    times = {}
    for label, extra in (("plain", {}), ("prompt_lookup", {"prompt_lookup_num_tokens": 8})):
        started = time.perf_counter()
        for ids in prompts:
            input_ids = torch.tensor([ids])
            with torch.inference_mode():
                model.generate(input_ids, attention_mask=torch.ones_like(input_ids), do_sample=False,
                               max_new_tokens=max_tokens, pad_token_id=pad, **extra)
        times[label] = time.perf_counter() - started
    return {"workload": name, "batch": 1, "plain_s": times["plain"], "prompt_lookup_s": times["prompt_lookup"],
            "speedup": times["plain"] / times["prompt_lookup"]}


def run_spec_decode_benchmark(settings: SpecBenchSettings) -> dict[str, Any]:
    """Run every workload; return the report (rows, peer rows, goals)."""
    from pyagent_engine.api.llm import LLM
    from pyagent_engine.models.embedded import find_embedded_gguf

    llm = LLM()
    rows: list[dict[str, Any]] = []
    peer_rows: list[dict[str, Any]] = []
    gguf = find_embedded_gguf()
    peer_model = None
    peer_info: dict[str, Any] = {"available": False, "reason": "disabled (--no-peer)"}
    if settings.peer and gguf is not None and importlib.util.find_spec("transformers") is not None:
        peer_model = _hf_model(Path(gguf))
        peer_info = {"available": True}
    elif settings.peer:
        peer_info = {"available": False, "reason": "transformers or the embedded GGUF is missing"}
    chosen = workloads(settings)
    first = next(iter(chosen.values()), None)
    costs = verify_costs(llm.loaded, llm.encode(first[0], chat=True)[0], settings) if first else []
    curve = CostCurve([(r["batch"] * (1 + r["draft_tokens"]), r["step_ms"] / 1e3) for r in costs]) if costs else None
    for name, texts in chosen.items():
        prompts = [llm.encode(text, chat=True)[0] for text in texts]
        rows.extend(_pyagent_rows(llm.loaded, name, prompts, settings, curve))
        if peer_model is not None:
            peer_rows.append(_hf_rows(peer_model, name, prompts, settings.tokens_for(name)))
    return {"benchmark": "spec-decode", "settings": attrs.asdict(settings), "rows": rows,
            "verify_costs": costs, "peer": peer_info, "peer_rows": peer_rows, "goals": goals(rows, costs)}


def ceilings(costs: Sequence[dict[str, Any]]) -> dict[int, float]:
    """Per batch size, the most a decode step can gain from drafts on the measured verify costs:
    the largest ``(1 + k) / ratio(k)`` - ``k`` draft tokens per request, every one accepted."""
    best: dict[int, float] = {}
    for row in costs:
        gain = (1 + row["draft_tokens"]) / row["ratio"]
        best[row["batch"]] = max(best.get(row["batch"], 0.0), gain)
    return best


def goals(rows: Sequence[dict[str, Any]], costs: Sequence[dict[str, Any]] = ()) -> list[dict[str, Any]]:
    """The issue's goals, each with the measured value, whether it is met, the modelled value (from
    the cost curve, where there is one) and, for the code-editing goal, which is scored per batch
    size, the ceiling that batch size allows (see :func:`ceilings`)."""

    def worst(key: str, chosen: Sequence[dict[str, Any]]) -> float | None:
        values = [r[key] for r in chosen if r.get(key) is not None]
        return min(values) if values else None

    limits = ceilings(costs)
    scored = []
    for batch in sorted({r["batch"] for r in rows if r["workload"] == "code_editing"}):
        suffix_code = [r for r in rows if r["proposer"] == "suffix" and r["workload"] == "code_editing"
                       and r["batch"] == batch]
        code = worst("speedup", suffix_code)
        scored.append({"goal": f"suffix speedup on code editing >= 1.8x at batch {batch}", "value": code,
                       "met": code is not None and code >= 1.8, "modelled": worst("modelled_speedup", suffix_code),
                       "ceiling": limits.get(batch)})
    costs_us = [r["proposer_us_per_step"] for r in rows if r["proposer_us_per_step"] is not None]
    slowest = worst("speedup", rows)
    return [
        *scored,
        {"goal": "no workload below 0.95x", "value": slowest, "met": slowest is not None and slowest >= 0.95,
         "modelled": worst("modelled_speedup", rows), "ceiling": None},
        {"goal": "proposer cost <= 20 us per step", "value": max(costs_us, default=None),
         "met": bool(costs_us) and max(costs_us) <= 20, "modelled": None, "ceiling": None},
    ]
