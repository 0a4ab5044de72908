"""``pyagent bench spec-decode``: speculative decoding against no speculation and against transformers.

On the embedded SmolLM2-135M-Instruct, greedy, for each workload (a few prompts of each Spec-Bench
category in ``../shared/data/specbench`` plus a code-editing workload whose prompts ask to rewrite or
fix a given piece of code) and batch size (prompts cycled to fill the batch, all submitted at once):

- pyagent without speculation and with each proposer: wall time, output tokens, mean accepted
  length, proposer microseconds per step; speedup = time without / time with speculation (greedy
  outputs are identical, so both produce the same tokens; the benchmark checks it);
- the peer, Hugging Face transformers ``generate()`` at batch 1 on the same token ids, without and
  with ``prompt_lookup_num_tokens`` (its prompt-lookup decoding): its own speedup.

Heavy imports happen inside the functions. Timings on a shared machine are noisy: the report says
how many prompts and tokens it used so a run can be repeated.
"""

from __future__ import annotations

import importlib.util
import json
import os
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import attrs

SPECBENCH = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "specbench" / "question.jsonl"

_CODE = (
    "def average(values):\n    total = 0\n    for v in values:\n        total += v\n    return total / len(values)\n",
    "class Stack:\n    def __init__(self):\n        self.items = []\n\n    def push(self, item):\n"
    "        self.items.append(item)\n\n    def pop(self):\n        return self.items.pop(0)\n",
    "def find_max(numbers):\n    best = 0\n    for i in range(len(numbers)):\n        if numbers[i] > best:\n"
    "            best = numbers[i]\n    return best\n",
    "def read_config(path):\n    f = open(path)\n    lines = f.readlines()\n    config = {}\n    for line in lines:\n"
    "        key, value = line.split('=')\n        config[key] = value\n    return config\n",
)
CODE_EDITING = tuple(
    f"{task}\n\n```python\n{code}```"
    for task, code in zip(
        ("Rename the variables of this function to clearer names and return the whole function.",
         "Fix the bug in this class (pop should remove the last item) and show the corrected code.",
         "Fix this function so that it works for lists of negative numbers; output the full fixed code.",
         "Rewrite this function to use a with statement and strip whitespace; give the complete code."),
        _CODE, strict=True)
)
"""The code-editing workload: outputs copy most of their input."""


@attrs.frozen(kw_only=True)
class SpecBenchSettings:
    """What the benchmark runs."""

    proposers: tuple[str, ...] = ("ngram", "suffix")
    batch_sizes: tuple[int, ...] = (1, 8)
    prompts_per_workload: int = 2
    max_tokens: int = 64
    num_draft_tokens: int = 8
    categories: tuple[str, ...] | None = None
    peer: bool = True


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


def _run(engine: Any, prompts: Sequence[list[int]], max_tokens: int) -> tuple[float, list[list[int]]]:
    from pyagent_core.engine.params import SamplingParams

    params = SamplingParams(max_tokens=max_tokens, temperature=0.0)
    started = time.perf_counter()
    requests = [engine.add_request(ids, params) for ids in prompts]
    while engine.has_unfinished():
        engine.step()
    return time.perf_counter() - started, [list(r.output_token_ids) for r in requests]


def _pyagent_rows(loaded: Any, name: str, prompts: list[list[int]], settings: SpecBenchSettings) -> list[dict]:
    from pyagent_core.engine.core import Engine
    from pyagent_core.engine.speculative import SpeculativeConfig

    rows = []
    for batch in settings.batch_sizes:
        batch_prompts = [prompts[i % len(prompts)] for i in range(batch)]
        base_time, base_out = _run(Engine(loaded), batch_prompts, settings.max_tokens)
        tokens = sum(len(o) for o in base_out)
        for proposer in settings.proposers:
            engine = Engine(loaded, speculative=SpeculativeConfig(proposer=proposer,
                                                                  num_draft_tokens=settings.num_draft_tokens))
            spec_time, spec_out = _run(engine, batch_prompts, settings.max_tokens)
            stats = engine.speculative.stats.as_dict() if engine.speculative else {}
            rows.append({
                "workload": name, "batch": batch, "proposer": proposer, "output_tokens": tokens,
                "baseline_s": base_time, "spec_s": spec_time, "speedup": base_time / spec_time,
                "identical": spec_out == base_out, "mean_accepted_length": stats.get("mean_accepted_length"),
                "acceptance_rate": stats.get("acceptance_rate"),
                "proposer_us_per_step": stats.get("proposer_us_per_call"),
            })
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
    from pyagent_core.engine.llm import LLM
    from pyagent_core.models.embedded import find_embedded_gguf

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
    for name, texts in workloads(settings).items():
        prompts = [llm.encode(text, chat=True)[0] for text in texts]
        rows.extend(_pyagent_rows(llm.loaded, name, prompts, settings))
        if peer_model is not None:
            peer_rows.append(_hf_rows(peer_model, name, prompts, settings.max_tokens))
    return {"benchmark": "spec-decode", "settings": attrs.asdict(settings), "rows": rows,
            "peer": peer_info, "peer_rows": peer_rows, "goals": goals(rows)}


def goals(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The issue's goals, each with the measured value and whether it is met."""
    suffix_code = [r["speedup"] for r in rows if r["proposer"] == "suffix" and r["workload"] == "code_editing"]
    costs = [r["proposer_us_per_step"] for r in rows if r["proposer_us_per_step"] is not None]
    slowest = min((r["speedup"] for r in rows), default=None)
    return [
        {"goal": "suffix speedup on code editing >= 1.8x", "value": min(suffix_code, default=None),
         "met": bool(suffix_code) and min(suffix_code) >= 1.8},
        {"goal": "no workload below 0.95x", "value": slowest, "met": slowest is not None and slowest >= 0.95},
        {"goal": "proposer cost <= 20 us per step", "value": max(costs, default=None),
         "met": bool(costs) and max(costs) <= 20},
    ]
