"""The engine benchmark behind ``pyagent bench engine``: pyagent against its peers, in one run.

On the embedded SmolLM2-135M-Instruct (or ``--model``: a GGUF file or checkpoint folder of any installed
architecture) and the same chat prompts (templated once, by pyagent, so every engine sees the same token
ids; raw text for a model without a chat template), it measures greedy generation of a fixed number of tokens
(end-of-sequence ignored):

- pyagent single-stream, for each dtype: prefill tok/s (prompt tokens / time to first token) and
  decode tok/s (tokens after the first / time after the first);
- Hugging Face transformers ``generate()`` single-stream on the same GGUF or folder, float32 and bfloat16, timed
  the same way through a streamer that notes when each token arrives;
- pyagent aggregate output tok/s with 1, 8 and 32 concurrent requests (pyagent's default dtype);
- llama.cpp (``llama-cpp-python``) single-stream on the same GGUF, when it is importable (a checkpoint
  folder has no llama.cpp row);
- with a ``llama-bench`` binary, pp512 and tg128 of pyagent and of that native llama.cpp on the same
  GGUF (:mod:`pyagent_engine.benchmarks.llama_bench`);

then the ratios the engine is judged by. ``model`` measures another GGUF instead of the embedded one.
A peer that is not installed is reported, not fatal.
Heavy imports (torch, transformers, llama_cpp) happen inside the functions that need them.
"""

from __future__ import annotations

import importlib.util
import inspect
import os
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import attrs

from pyagent_engine.benchmarks.llama_bench import PpTgSettings, pyagent_pp_tg, run_llama_bench
from pyagent_engine.benchmarks.llama_cpp_peer import run_in_child

PROMPTS = (
    "What is the capital of France, and why did it become the capital?",
    "Write a short poem about the sea at night.",
    "Explain in simple terms how a refrigerator keeps food cold, step by step, for a curious child "
    "who has just asked why the back of the fridge feels warm.",
    "Summarize this paragraph in two sentences: The printing press, developed by Johannes Gutenberg "
    "around 1440, made books far cheaper to produce. Within decades, printing shops had spread across "
    "Europe, literacy rose, and ideas travelled faster than ever before, which helped fuel the "
    "Renaissance, the Reformation and the Scientific Revolution.",
    "Give me three tips for learning a new language as an adult.",
    "Write a Python function that returns the n-th Fibonacci number, with a docstring.",
)

DTYPES = ("bfloat16", "float32")


def default_dtype() -> str:
    """pyagent's default dtype: the default of :class:`~pyagent_engine.api.llm.LLM`'s ``dtype``."""
    from pyagent_engine.api.llm import LLM

    return str(inspect.signature(LLM).parameters["dtype"].default)


@attrs.frozen(kw_only=True)
class EngineBenchSettings:
    """What the benchmark runs.

    Attributes:
        model: the GGUF file or checkpoint folder (``None``: the embedded model).
        dtypes: pyagent's single-stream dtypes.
        attention: pyagent's attention backend (``None``: the registry's selection).
        num_prompts: how many of :data:`PROMPTS` the single-stream runs use.
        new_tokens: tokens generated per single-stream request.
        concurrency: the numbers of concurrent requests of the aggregate runs.
        aggregate_new_tokens: tokens generated per request in the aggregate runs.
        model: the GGUF file or checkpoint folder measured (``None``: the embedded model).
        pp_tg: the pp/tg comparison with llama.cpp's ``llama-bench``, or ``None`` to skip it.
        precisions: pyagent's precisions for a GGUF's quantized matrices, each measured in the
            single-stream and pp/tg runs (``()``: the engine's default alone; the aggregate runs and the
            ratios use the default, or the first given).
    """

    dtypes: tuple[str, ...] = DTYPES
    attention: str | None = None
    num_prompts: int = 4
    new_tokens: int = 128
    concurrency: tuple[int, ...] = (1, 8, 32)
    aggregate_new_tokens: int = 64
    model: Path | None = None
    pp_tg: PpTgSettings | None = None
    precisions: tuple[str, ...] = ()

    @classmethod
    def quick(cls, dtypes: tuple[str, ...] = DTYPES, attention: str | None = None,
              **others: Any) -> EngineBenchSettings:
        """A smoke-test sized run: one prompt, a few tokens (the pp/tg comparison keeps its sizes)."""
        return cls(dtypes=dtypes, attention=attention, num_prompts=1, new_tokens=4, aggregate_new_tokens=2, **others)


@attrs.define
class TokenTimes:
    """When generation started and when each new token arrived (``time.perf_counter`` seconds)."""

    start: float
    tokens: list[float] = attrs.field(factory=list)

    def stats(self, prompt_tokens: int) -> dict[str, float]:
        """Time to first token, prefill tok/s and decode tok/s of one finished request."""
        ttft = self.tokens[0] - self.start
        decode_time = self.tokens[-1] - self.tokens[0]
        return {"ttft_s": ttft, "prefill_tok_s": prompt_tokens / ttft,
                "decode_tok_s": (len(self.tokens) - 1) / decode_time if decode_time > 0 else 0.0}


def _summarize(runs: Sequence[dict[str, float]]) -> dict[str, Any]:
    """The median of each statistic over the prompts, plus the per-prompt runs."""
    return {**{key: statistics.median(r[key] for r in runs) for key in runs[0]}, "runs": list(runs)}


def _single_stream(engine: str, dtype: str, prompts: Sequence[list[int]],
                   run_one: Callable[[list[int]], dict[str, float]], **extra: Any) -> dict[str, Any]:
    """Run ``run_one`` once to warm up, then once per prompt; one row of the single-stream table."""
    run_one(prompts[0])
    return {"engine": engine, "dtype": dtype, **extra, **_summarize([run_one(p) for p in prompts])}


# --- pyagent -----------------------------------------------------------------------------------


def _pyagent_single(llm: Any, dtype: str, prompts: Sequence[list[int]], new_tokens: int) -> dict[str, Any]:
    """pyagent's single-stream row on ``llm`` (loaded in ``dtype``), naming its precision."""
    from pyagent_engine.requests.params import SamplingParams

    params = SamplingParams(max_tokens=new_tokens, temperature=0.0, ignore_eos=True)

    def run_one(ids: list[int]) -> dict[str, float]:
        (output,) = llm.generate([ids], params)
        metrics = output.metrics
        if output.error is not None or metrics is None or metrics.time_to_first_token is None:
            raise RuntimeError(f"pyagent request failed: {output.error}")
        return {"ttft_s": metrics.time_to_first_token,
                "prefill_tok_s": len(ids) / metrics.time_to_first_token,
                "decode_tok_s": metrics.decode_tokens_per_s or 0.0}

    return _single_stream("pyagent", dtype, prompts, run_one, attention=llm.engine.backends["attention"],
                          precision=llm.loaded.precision)


def _pyagent_aggregate(llm: Any, dtype: str, prompts: Sequence[list[int]], concurrency: int,
                       new_tokens: int) -> dict[str, Any]:
    from pyagent_engine.requests.params import SamplingParams

    params = SamplingParams(max_tokens=new_tokens, temperature=0.0, ignore_eos=True)
    batch = [prompts[i % len(prompts)] for i in range(concurrency)]
    start = time.perf_counter()
    outputs = llm.generate(batch, params)
    wall = time.perf_counter() - start
    failed = [o.error for o in outputs if o.error is not None]
    if failed:
        raise RuntimeError(f"pyagent request failed: {failed[0]}")
    produced = sum(len(o.output_token_ids) for o in outputs)
    return {"engine": "pyagent", "dtype": dtype, "attention": llm.engine.backends["attention"],
            "concurrency": concurrency, "output_tokens": produced, "wall_s": wall, "tok_s": produced / wall}


# --- peers -------------------------------------------------------------------------------------


class _Streamer:
    """A ``generate(streamer=...)`` that notes the arrival time of each new token.

    transformers first puts the prompt, then each generated token; only the latter are timed.
    """

    def __init__(self, times: TokenTimes) -> None:
        self.times = times
        self.prompt_seen = False

    def put(self, value: Any) -> None:
        """Called by ``generate`` with the prompt, then with each new token."""
        if self.prompt_seen:
            self.times.tokens.append(time.perf_counter())
        self.prompt_seen = True

    def end(self) -> None:
        """Called by ``generate`` when it is done; nothing to do."""


def transformers_peer(model_path: Path, prompts: Sequence[list[int]],
                      new_tokens: int) -> tuple[dict[str, Any], list[dict]]:
    """transformers' single-stream rows (float32, then bfloat16) on ``model_path`` (a GGUF file or a
    checkpoint folder); ``(peer info, rows)``."""
    if importlib.util.find_spec("transformers") is None:
        return {"available": False, "reason": "not installed"}, []
    os.environ["HF_HUB_OFFLINE"] = "1"  # the GGUF is local; never reach for the hub
    import torch
    import transformers

    transformers.logging.set_verbosity_error()
    transformers.logging.disable_progress_bar()
    model: Any
    if model_path.is_dir():
        model = transformers.AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32)
    else:
        with tempfile.TemporaryDirectory() as folder:
            (Path(folder) / model_path.name).symlink_to(model_path.resolve())
            model = transformers.AutoModelForCausalLM.from_pretrained(folder, gguf_file=model_path.name,
                                                                      dtype=torch.float32)
    model.eval()
    pad = model.generation_config.eos_token_id
    pad = pad[0] if isinstance(pad, list) else pad

    def run_one(ids: list[int]) -> dict[str, float]:
        input_ids = torch.tensor([ids])
        times = TokenTimes(time.perf_counter())
        with torch.inference_mode():
            model.generate(input_ids, attention_mask=torch.ones_like(input_ids), do_sample=False,
                           max_new_tokens=new_tokens, min_new_tokens=new_tokens, pad_token_id=pad,
                           streamer=_Streamer(times))
        return times.stats(len(ids))

    rows = []
    for dtype in ("float32", "bfloat16"):
        model.to(getattr(torch, dtype))
        rows.append(_single_stream("transformers", dtype, prompts, run_one))
    return {"available": True, "version": transformers.__version__}, rows


def llama_cpp_peer(gguf: Path, prompts: Sequence[list[int]], new_tokens: int) -> tuple[dict[str, Any], list[dict]]:
    """llama.cpp's single-stream row on ``gguf`` (its own dtypes: the GGUF's); ``(peer info, rows)``.

    It runs in a child process (:mod:`pyagent_engine.benchmarks.llama_cpp_peer`), so a crash makes the
    peer unavailable instead of ending the benchmark.
    """
    result, reason = run_in_child(gguf, prompts, new_tokens)
    if result is None:
        return {"available": False, "reason": reason}, []
    runs = []
    for ids, run in zip(prompts, result["runs"], strict=True):
        times = TokenTimes(run["start"], run["tokens"])
        runs.append(times.stats(len(ids)))
    return {"available": True, "version": result["version"]}, [{"engine": "llama.cpp", "dtype": "gguf",
                                                                 **_summarize(runs)}]


# --- the report --------------------------------------------------------------------------------


def _find(rows: Sequence[dict[str, Any]], **match: Any) -> dict[str, Any] | None:
    return next((r for r in rows if all(r.get(k) == v for k, v in match.items())), None)


def _ratio(name: str, numerator: dict[str, Any] | None, denominator: dict[str, Any] | None, key: str,
           denominator_key: str, goal: float | None) -> dict[str, Any]:
    value = None
    if numerator is not None and denominator is not None and denominator[denominator_key] > 0:
        value = numerator[key] / denominator[denominator_key]
    return {"name": name, "ratio": value, "goal": goal,
            "met": None if value is None or goal is None else value >= goal}


def ratios(single: Sequence[dict[str, Any]], aggregate: Sequence[dict[str, Any]], dtype: str,
           precision: str) -> list[dict[str, Any]]:
    """The ratios the engine is judged by, pyagent at ``precision`` (``ratio`` is ``None`` when a side
    was not measured)."""
    hf32, hf16 = (_find(single, engine="transformers", dtype=name) for name in ("float32", "bfloat16"))
    ours, ours32, ours16 = (_find(single, engine="pyagent", dtype=name, precision=precision)
                            for name in (dtype, "float32", "bfloat16"))
    top = max(aggregate, key=lambda r: r["concurrency"], default=None)
    return [
        _ratio(f"decode: pyagent default ({dtype}) / transformers float32", ours, hf32, "decode_tok_s",
               "decode_tok_s", 3.0),
        _ratio("decode: pyagent float32 / transformers float32", ours32, hf32, "decode_tok_s", "decode_tok_s", 2.0),
        _ratio("decode: pyagent bfloat16 / transformers bfloat16", ours16, hf16, "decode_tok_s", "decode_tok_s",
               None),
        _ratio(f"prefill: pyagent default ({dtype}) / transformers float32", ours, hf32, "prefill_tok_s",
               "prefill_tok_s", None),
        _ratio(f"aggregate@{top['concurrency'] if top else '-'}: pyagent / llama.cpp single-stream decode", top,
               _find(single, engine="llama.cpp"), "tok_s", "decode_tok_s", 1.0),
    ]


#: The goal of pyagent's pp and tg over llama-bench's (issue 28: at least twice llama.cpp's speed).
PP_TG_GOAL = 2.0


def pp_tg_ratios(rows: Sequence[dict[str, Any]], settings: PpTgSettings, dtype: str,
                 precision: str) -> list[dict[str, Any]]:
    """pyagent's pp and tg (in ``dtype``, at ``precision`` first, then at each other precision measured)
    over llama-bench's (``ratio`` ``None`` where a side is missing)."""
    peer = _find(rows, engine="llama.cpp")
    measured = [r["precision"] for r in rows if r["engine"] == "pyagent" and r["dtype"] == dtype]
    tests = (("pp", settings.prompt_tokens, "pp_tok_s"), ("tg", settings.gen_tokens, "tg_tok_s"))
    return [_ratio(f"{name}{size}: pyagent {dtype} {p} / llama-bench",
                   _find(rows, engine="pyagent", dtype=dtype, precision=p), peer, key, key, PP_TG_GOAL)
            for p in sorted(set(measured) | {precision}, key=lambda p: p != precision) for name, size, key in tests]


def run_engine_benchmark(settings: EngineBenchSettings) -> dict[str, Any]:
    """Run every measurement of ``settings`` and return the JSON-ready report."""
    import torch

    from pyagent_engine.api.llm import LLM
    from pyagent_engine.models.config import resolve_precision
    from pyagent_engine.models.loader import resolve_model_path

    source = resolve_model_path(settings.model)
    texts = PROMPTS[:settings.num_prompts]
    main_dtype = default_dtype()
    dtypes = sorted(set(settings.dtypes) | {main_dtype}, key=lambda d: d != main_dtype)  # the default first
    default = resolve_precision()
    precisions = [resolve_precision(p) for p in settings.precisions] or [default]
    main_precision = default if default in precisions else precisions[0]
    single: list[dict[str, Any]] = []
    aggregate: list[dict[str, Any]] = []
    prompts: list[list[int]] = []
    pp_tg: list[dict[str, Any]] = []
    for dtype in dtypes:
        for precision in sorted(precisions, key=lambda p: p != main_precision):  # the main precision first
            if dtype not in settings.dtypes and precision != main_precision:
                continue
            llm = LLM(str(source), dtype=dtype, attention=settings.attention, precision=precision)
            chat = llm.loaded.chat_template is not None
            prompts = prompts or [llm.encode(text, chat=chat)[0] for text in texts]
            if dtype in settings.dtypes:
                single.append(_pyagent_single(llm, dtype, prompts, settings.new_tokens))
            if dtype == main_dtype and precision == main_precision:
                aggregate = [_pyagent_aggregate(llm, dtype, prompts, n, settings.aggregate_new_tokens)
                             for n in settings.concurrency]
            if settings.pp_tg is not None and dtype in settings.dtypes:
                pp_tg.append(pyagent_pp_tg(llm, dtype, settings.pp_tg))
            llm.close()
    transformers_info, rows = transformers_peer(source, prompts, settings.new_tokens)
    single += rows
    llama_info: dict[str, Any] = {"available": False, "reason": "a checkpoint folder, not a GGUF file"}
    if not source.is_dir():
        llama_info, rows = llama_cpp_peer(source, prompts, settings.new_tokens)
        single += rows
    extra: dict[str, Any] = {}
    if settings.pp_tg is not None:
        peer, reason = run_llama_bench(settings.pp_tg, source)
        pp_tg += [] if peer is None else [peer]
        extra["pp_tg"] = {"prompt_tokens": settings.pp_tg.prompt_tokens, "gen_tokens": settings.pp_tg.gen_tokens,
                          "repetitions": settings.pp_tg.repetitions, "binary": str(settings.pp_tg.binary),
                          "peer": {"available": peer is not None, "reason": reason}, "rows": pp_tg,
                          "ratios": pp_tg_ratios(pp_tg, settings.pp_tg, main_dtype if main_dtype in settings.dtypes
                                                 else settings.dtypes[0], main_precision)}
    return {
        "benchmark": "engine",
        "model": source.name,
        "torch_threads": torch.get_num_threads(),
        "default_dtype": main_dtype,
        "precision": main_precision,
        "precisions": precisions,
        "prompt_tokens": [len(p) for p in prompts],
        "new_tokens": settings.new_tokens,
        "aggregate_new_tokens": settings.aggregate_new_tokens,
        "peers": {"transformers": transformers_info, "llama.cpp": llama_info},
        "single_stream": single,
        "aggregate": aggregate,
        "ratios": ratios(single, aggregate, main_dtype, main_precision),
        **extra,
    }
