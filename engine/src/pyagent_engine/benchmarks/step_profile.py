"""Where a batch-1 decode step's time goes, for ``pyagent bench engine --profile``.

One greedy request (a short prompt of fixed token ids, end-of-sequence ignored) decodes ``steps``
tokens after its prefill, with 1 and with 2 threads for the kernels (each a model loaded for it). Each
decode step is timed three ways at once:

- the wall time of ``Engine.step``;
- each stage's ``run`` (:func:`pyagent_engine.stages.timing.timed_stages`), the model's forward among them;
- the time inside the C kernels, counted by the kernels themselves (:mod:`pyagent_kernels.profile`):
  per area (linear products, attention, layer operations, LoRA, mixers), and the part the calling thread
  spent handing work to the helper threads and waiting for their last chunks.

The split it reports, per step: **kernels** (time inside the C kernels less the hand-offs),
**hand-offs** (to the helper threads), and **outside the kernels** (the step's wall time less the
time inside the kernels: the engine's stages in Python, the forward's Python between kernel calls,
torch operations, the cffi transitions), which it divides into the forward's and the rest of the
step's. The figures are means over the steps, and the shares of the median step. The calling thread's
CPU time per step is reported beside the wall time: with one thread, a CPU time well below the wall
time means the host was busy and the step waited for a core (which inflates every part). Timing a
stage or counting a kernel adds a few hundred nanoseconds per call to what it measures.
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path
from typing import Any

import attrs

#: The thread counts profiled by default.
PROFILE_THREADS = (1, 2)


@attrs.frozen(kw_only=True)
class StepProfileSettings:
    """What the profile runs.

    Attributes:
        model: the GGUF file or checkpoint folder (``None``: the embedded model).
        dtype: the working dtype.
        precision: the precision of products with quantized matrices (``None``: the engine's default).
        threads: the thread counts to profile, each on its own model.
        steps: decode steps timed per thread count.
        prompt_tokens: length of the request's prompt.
    """

    model: Path | None = None
    dtype: str = "float32"
    precision: str | None = None
    threads: tuple[int, ...] = PROFILE_THREADS
    steps: int = 128
    prompt_tokens: int = 16


def _decode_steps(llm: Any, settings: StepProfileSettings) -> list[dict[str, Any]]:
    """One record per decode step of a greedy batch-1 request on ``llm``."""
    from pyagent_engine.requests.params import SamplingParams
    from pyagent_engine.stages.timing import timed_stages
    from pyagent_kernels.profile import count_kernels

    engine = llm.engine
    vocab = llm.loaded.config.vocab_size
    prompt = [(1000 + 7 * i) % vocab for i in range(settings.prompt_tokens)]
    params = SamplingParams(max_tokens=settings.steps + 1, temperature=0.0, ignore_eos=True)
    llm.generate([prompt], SamplingParams(max_tokens=8, temperature=0.0, ignore_eos=True))  # warm-up
    engine.add_request(prompt, params)
    engine.step()  # the prefill, and the first token
    records = []
    while engine.has_unfinished():
        with timed_stages(engine.stages) as stages, count_kernels() as kernels:
            started, cpu = time.perf_counter(), time.thread_time()
            engine.step()
            wall, cpu = time.perf_counter() - started, time.thread_time() - cpu
        records.append({"wall_s": wall, "cpu_s": cpu, "stages_s": dict(stages.seconds), "kernels": kernels})
    return records


def _summary(records: list[dict[str, Any]], threads: int) -> dict[str, Any]:
    """Means per step and the median step's shares."""
    steps = len(records)

    def mean(value: Any) -> float:
        return sum(value(r) for r in records) / steps

    wall = mean(lambda r: r["wall_s"])
    inside = mean(lambda r: r["kernels"].total_s)
    handoff = mean(lambda r: r["kernels"].handoff_s)
    forward = mean(lambda r: r["stages_s"].get("forward", 0.0))
    areas = {area: mean(lambda r, a=area: r["kernels"].seconds[a]) for area in records[0]["kernels"].seconds}
    stages = {name: mean(lambda r, n=name: r["stages_s"].get(n, 0.0)) for name in records[0]["stages_s"]}
    outside_shares = sorted((r["wall_s"] - r["kernels"].total_s) / r["wall_s"] for r in records)
    return {
        "threads": threads, "steps": steps, "tok_s": 1.0 / wall, "compiled": records[0]["kernels"].compiled,
        "step_ms": wall * 1e3, "step_cpu_ms": mean(lambda r: r["cpu_s"]) * 1e3,
        "kernels_ms": (inside - handoff) * 1e3, "handoff_ms": handoff * 1e3,
        "outside_ms": (wall - inside) * 1e3, "outside_forward_ms": (forward - inside) * 1e3,
        "outside_rest_ms": (wall - forward) * 1e3,
        "kernels_share": (inside - handoff) / wall, "handoff_share": handoff / wall,
        "outside_share": (wall - inside) / wall,
        "median_step_outside_share": statistics.median(outside_shares),
        "kernel_areas_ms": {area: seconds * 1e3 for area, seconds in areas.items()},
        "kernel_calls_per_step": {area: records[0]["kernels"].calls[area] for area in areas},
        "stages_ms": {name: seconds * 1e3 for name, seconds in stages.items()},
    }


def run_step_profile(settings: StepProfileSettings) -> dict[str, Any]:
    """Profile batch-1 decode steps at each thread count of ``settings``; the JSON-ready report."""
    import torch

    import pyagent_kernels
    from pyagent_engine.api.llm import LLM
    from pyagent_engine.models.loader import resolve_model_path

    source = resolve_model_path(settings.model)
    previous = torch.get_num_threads()
    rows = []
    try:
        for threads in settings.threads:
            torch.set_num_threads(threads)  # the engine's kernels take torch's thread count when built
            llm = LLM(str(source), dtype=settings.dtype, precision=settings.precision)
            try:
                rows.append(_summary(_decode_steps(llm, settings), threads) | {"precision": llm.loaded.precision})
            finally:
                llm.close()
    finally:
        torch.set_num_threads(previous)
    status = pyagent_kernels.status()
    return {"benchmark": "engine-profile", "model": source.name, "dtype": settings.dtype,
            "prompt_tokens": settings.prompt_tokens, "kernels": {"isa": status["isa"], "int8_dot": status["int8_dot"]},
            "rows": rows}
