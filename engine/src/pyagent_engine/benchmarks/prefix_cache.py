"""``pyagent bench prefix-cache``: time to first token with the prefix cache on against off.

The workload is what prefix caching is for: requests that share a long system prompt (a help desk's
numbered rules, ``prefix_tokens`` long) and differ in a short user question. Two engines over the
same loaded model serve it, identical but for ``prefix_caching``; the peer is the engine with the
cache off. Requests go one at a time, alternating between the engines, so each time to first token
is one request's prefill and both engines see the same machine load. The first request of the
cache-on engine computes the shared prefix (a cold cache); every later one finds it cached.

Reported: median time to first token of the warm requests (all but the first) per engine, their
ratio (off / on), the cold first request, the prompt tokens found cached, and whether greedy outputs
were identical (they must be: the cache changes where keys and values come from, not what they are).
"""

from __future__ import annotations

import statistics
import time
from typing import Any

import attrs

QUESTIONS = (
    "Can I return a book a week late?", "How many books may I borrow at once?",
    "Is the reading room open on Sundays?", "Can I reserve a study room for a group of six?",
    "Do you lend laptops to visitors?", "How do I renew a loan online?",
    "What happens if I lose a borrowed book?", "Can children get their own library card?",
    "May I bring coffee into the reading room?", "How long can I keep a reserved item on hold?",
    "Do you accept donations of old textbooks?", "Where can I print a document?",
)
"""User questions, one per request (cycled when more requests are asked for)."""

_RULE_TOPICS = (
    ("loans", "books may be borrowed for {n} days and renewed twice unless another reader reserved them"),
    ("fines", "late returns cost {n} cents per day, capped at the price of the item"),
    ("rooms", "study room {n} seats up to {m} people and is booked in two-hour slots"),
    ("hours", "branch {n} opens at {m} in the morning on weekdays and at noon on Saturdays"),
    ("devices", "laptop {n} is lent for {m} hours at the front desk to card holders over sixteen"),
    ("holds", "a reserved item waits {n} days on the hold shelf before it goes to the next reader"),
)


def system_prompt(tokenizer: Any, prefix_tokens: int) -> str:
    """A help desk's rules, numbered, at least ``prefix_tokens`` tokens long (no two rules alike)."""
    lines = ["You answer questions at the front desk of the city library. Follow these rules exactly,"
             " quote the rule you apply, and answer in one or two sentences."]
    number = 0
    while len(tokenizer.encode("\n".join(lines))) < prefix_tokens:
        topic, text = _RULE_TOPICS[number % len(_RULE_TOPICS)]
        number += 1
        lines.append(f"Rule {number} ({topic}): " + text.format(n=number + 6, m=number % 5 + 2) + ".")
    return "\n".join(lines)


@attrs.frozen(kw_only=True)
class PrefixCacheBenchSettings:
    """What the benchmark runs.

    Attributes:
        requests: requests per engine (the first warms the cache; at least 2).
        prefix_tokens: length of the shared system prompt in tokens (at least).
        max_tokens: tokens generated per request (greedy).
        dtype: model dtype.
        eviction: the cache's eviction policy (default: the registry's selection).
        kv_cache_gib: KV cache of each engine.
    """

    requests: int = 8
    prefix_tokens: int = 512
    max_tokens: int = 4
    dtype: str = "bfloat16"
    eviction: str | None = None
    kv_cache_gib: float = 0.25


def _serve(engine: Any, ids: list[int], params: Any) -> Any:
    engine.add_request(ids, params)
    while True:
        for output in engine.step():
            if output.finished:
                return output


def run_prefix_cache_benchmark(settings: PrefixCacheBenchSettings, loaded: Any = None) -> dict[str, Any]:
    """Run the workload through both engines (over ``loaded``, or the embedded model) and report."""
    import torch

    from pyagent_core.errors import RequestError
    from pyagent_engine.core.config import EngineConfig
    from pyagent_engine.core.engine import Engine
    from pyagent_engine.models.loader import load_model
    from pyagent_engine.requests.params import SamplingParams

    if settings.requests < 2:
        raise RequestError(f"requests must be at least 2 (the first one warms the cache), got {settings.requests}")
    loaded = loaded or load_model(None, settings.dtype)
    system = system_prompt(loaded.tokenizer, settings.prefix_tokens)
    if loaded.chat_template is None:
        raise RequestError("the model has no chat template; the benchmark builds chat prompts")
    prompts = [loaded.tokenizer.encode(loaded.chat_template.render(
        [{"role": "system", "content": system}, {"role": "user", "content": QUESTIONS[i % len(QUESTIONS)]}],
        add_generation_prompt=True), add_special_tokens=False) for i in range(settings.requests)]
    params = SamplingParams(temperature=0, max_tokens=settings.max_tokens)
    engines = {
        "off": Engine(loaded, config=EngineConfig(kv_cache_gib=settings.kv_cache_gib)),
        "on": Engine(loaded, config=EngineConfig(kv_cache_gib=settings.kv_cache_gib, prefix_caching=True,
                                                 eviction=settings.eviction)),
    }
    _serve(engines["off"], loaded.tokenizer.encode("Warm up."), params)  # first-call costs, outside the cache
    outputs: dict[str, list[Any]] = {name: [] for name in engines}
    started = time.perf_counter()
    for ids in prompts:
        for name, engine in engines.items():
            outputs[name].append(_serve(engine, ids, params))
    wall = time.perf_counter() - started
    results = {}
    for name, finals in outputs.items():
        ttfts = [o.metrics.time_to_first_token for o in finals]
        results[name] = {"cold_ttft_s": ttfts[0], "warm_ttft_median_s": statistics.median(ttfts[1:]),
                         "warm_ttft_s": ttfts[1:], "cached_prompt_tokens": [o.num_cached_tokens for o in finals]}
    for engine in engines.values():
        engine.close()
    return {
        "benchmark": "prefix-cache",
        "settings": attrs.asdict(settings),
        "eviction": engines["on"].backends["eviction"],
        "prompt_tokens": [len(ids) for ids in prompts],
        "torch_threads": torch.get_num_threads(),
        "wall_s": wall,
        "results": results,
        "ratio_warm_ttft_off_to_on": results["off"]["warm_ttft_median_s"] / results["on"]["warm_ttft_median_s"],
        "outputs_identical": [o.output_token_ids for o in outputs["off"]]
        == [o.output_token_ids for o in outputs["on"]],
    }
