"""The Prometheus metrics plugin, driven by the real engine and read back with prometheus_client's own parser.

The plugin is reached as any engine reaches it: through its entry point in the installed registry.
References are what the outputs report (token counts, finish reasons, each request's time to first
token and total time) and the engine's configured limits; timings are never asserted.
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from prometheus_client.parser import text_string_to_metric_families

from pyagent_engine.api.llm import LLM
from pyagent_engine.core.config import EngineConfig
from pyagent_engine.core.engine import Engine
from pyagent_engine.metrics import prometheus
from pyagent_engine.requests.params import SamplingParams
from pyagent_engine.requests.request import RequestOutput
from pyagent_engine.spec.config import SpeculativeConfig

SYSTEM = ("You are a careful assistant for a public library. Answer in one short sentence, name your source "
          "when you know it, and say so plainly when you do not know the answer.")
COPY_PROMPTS = tuple(f"Repeat this line three times: {line}" for line in (
    "the quick brown fox jumps over the lazy dog", "one two three four five six seven eight nine ten",
    "red orange yellow green blue indigo violet"))
QUESTIONS = ("When does the library open?", "Can I renew a book online?", "Where is the children's section?")


def read(engine_id: str) -> tuple[dict[str, dict[str, float]], dict[str, str]]:
    """The engine's exposition parsed: ``{sample name: {extra labels as text: value}}`` and each family's type."""
    found = prometheus.exposition(engine_id)
    assert found is not None, "the metrics plugin did not start with the engine"
    body, content_type = found
    assert content_type.startswith("text/plain")
    samples: dict[str, dict[str, float]] = {}
    types = {}
    for family in text_string_to_metric_families(body.decode()):
        types[family.name] = family.type
        for sample in family.samples:
            assert sample.labels["engine"] == engine_id
            extra = ",".join(f"{k}={v}" for k, v in sorted(sample.labels.items()) if k not in ("engine", "model_name"))
            samples.setdefault(sample.name, {})[extra] = sample.value
    return samples, types


def value(samples: dict[str, dict[str, float]], name: str, labels: str = "") -> float:
    return samples["pyagent:" + name][labels]


def chat_prompts(llm: LLM) -> list[list[int]]:
    return [llm.encode([{"role": "system", "content": SYSTEM}, {"role": "user", "content": q}])[0] for q in QUESTIONS]


def serve(engine: Engine, prompts: Sequence[list[int]], params: Sequence[SamplingParams]) -> list[RequestOutput]:
    """Submit every prompt, step until all finish; the final outputs."""
    for ids, sampling in zip(prompts, params, strict=True):
        engine.add_request(ids, sampling)
    finals = []
    while engine.has_unfinished():
        finals += [o for o in engine.step() if o.finished]
    return finals


@pytest.fixture(scope="module")
def cached_run(llm_bf16):
    """Two rounds of the same three prompts with the prefix cache on: finals of both, the parsed metrics."""
    engine = Engine(llm_bf16.loaded, config=EngineConfig(prefix_caching=True))
    prompts = chat_prompts(llm_bf16)
    params = [SamplingParams(temperature=0, max_tokens=n) for n in (3, 6, 9)]
    outputs = serve(engine, prompts, params) + serve(engine, prompts, params)
    yield outputs, read(engine.info.engine_id)
    engine.close()


def test_token_counters_equal_what_the_outputs_report(cached_run):
    outputs, (samples, types) = cached_run
    assert all(o.error is None for o in outputs)
    assert value(samples, "prompt_tokens_total") == sum(len(o.prompt_token_ids) for o in outputs)
    assert value(samples, "generation_tokens_total") == sum(len(o.output_token_ids) for o in outputs)
    assert value(samples, "request_generation_tokens_sum") == sum(len(o.output_token_ids) for o in outputs)
    assert value(samples, "request_params_max_tokens_sum") == 2 * (3 + 6 + 9)
    for reason in ("stop", "length", "abort", "error"):
        assert value(samples, "request_success_total", f"finished_reason={reason}") == sum(
            o.finish_reason == reason for o in outputs)
    assert types["pyagent:prompt_tokens"] == "counter" and types["pyagent:time_to_first_token_seconds"] == "histogram"
    assert types["pyagent:num_requests_running"] == "gauge"


def test_prefix_cache_counters_are_per_step_sums(cached_run):
    """Fails when the step stats report the pool's running totals: each step would add them again."""
    outputs, (samples, _) = cached_run
    hits = sum(o.num_cached_tokens for o in outputs)
    assert hits > 0, "the second round meant to hit the cache"
    assert value(samples, "prefix_cache_hits_total") == hits
    assert value(samples, "prefix_cache_queries_total") == sum(len(o.prompt_token_ids) for o in outputs)


def test_histograms_count_every_request_and_every_interval(cached_run):
    outputs, (samples, _) = cached_run
    count = len(outputs)
    for name in ("time_to_first_token_seconds", "e2e_request_latency_seconds", "request_queue_time_seconds",
                 "request_prefill_time_seconds", "request_decode_time_seconds", "request_inference_time_seconds",
                 "request_prompt_tokens", "request_generation_tokens"):
        assert value(samples, name + "_count") == count, name
        assert value(samples, name + "_bucket", "le=+Inf") == count, name
    # one interval per token after the first without speculation
    assert value(samples, "inter_token_latency_seconds_count") == sum(len(o.output_token_ids) - 1 for o in outputs)
    # the engine's own per-request figures, summed
    ttft = sum(o.metrics.time_to_first_token for o in outputs)
    assert value(samples, "time_to_first_token_seconds_sum") == pytest.approx(ttft, rel=1e-9, abs=1e-9)
    e2e = sum(o.metrics.total_time for o in outputs)
    assert value(samples, "e2e_request_latency_seconds_sum") == pytest.approx(e2e, rel=1e-9, abs=1e-9)
    buckets = samples["pyagent:time_to_first_token_seconds_bucket"]
    cumulative = [buckets[f"le={le}"] for le in [*map(str, prometheus.TTFT_BUCKETS), "+Inf"]]
    assert cumulative == sorted(cumulative)


def test_gauges_read_zero_once_the_requests_finished(cached_run):
    _, (samples, _) = cached_run
    for name in ("num_requests_running", "num_requests_waiting", "kv_cache_usage_perc"):
        assert value(samples, name) == 0, name
    assert "pyagent:spec_decode_num_drafts_total" not in samples, "speculation was off"


def test_gauges_follow_the_scheduler_and_an_abort_between_steps_zeroes_them(llm_bf16):
    engine = Engine(llm_bf16.loaded, config=EngineConfig(max_num_seqs=2))
    try:
        engine_id = engine.info.engine_id
        requests = [engine.add_request(ids, SamplingParams(temperature=0, max_tokens=50))
                    for ids in chat_prompts(llm_bf16)]
        engine.step()
        samples, _ = read(engine_id)
        assert (value(samples, "num_requests_running"), value(samples, "num_requests_waiting")) == (2, 1)
        assert 0 < value(samples, "kv_cache_usage_perc") <= 1
        for request in requests:
            engine.abort(request)
        samples, _ = read(engine_id)
        for name in ("num_requests_running", "num_requests_waiting", "kv_cache_usage_perc"):
            assert value(samples, name) == 0, name
        assert value(samples, "request_success_total", "finished_reason=abort") == 3
        assert value(samples, "request_queue_time_seconds_count") == 2  # the third never left the queue
    finally:
        engine.close()
    assert prometheus.exposition(engine_id) is None, "a stopped engine's registry is dropped"


def test_speculative_counters(llm_bf16):
    engine = Engine(llm_bf16.loaded, speculative=SpeculativeConfig(proposer="ngram", num_draft_tokens=4))
    try:
        # copying from the prompt gives the n-gram proposer drafts that hold
        finals = serve(engine, [llm_bf16.encode(text, chat=True)[0] for text in COPY_PROMPTS],
                       [SamplingParams(temperature=0, max_tokens=24, ignore_eos=True)] * len(COPY_PROMPTS))
        samples, _ = read(engine.info.engine_id)
    finally:
        engine.close()
    generated = sum(len(o.output_token_ids) for o in finals)
    assert generated == 3 * 24 == value(samples, "generation_tokens_total")
    drafted, accepted = value(samples, "spec_decode_num_draft_tokens_total"), value(
        samples, "spec_decode_num_accepted_tokens_total")
    assert value(samples, "spec_decode_num_drafts_total") > 0 and 0 < accepted <= drafted
    # every step after the first token emits its accepted tokens plus one, except a final step cut short
    # by max_tokens; each of those steps is one inter-token interval
    intervals = value(samples, "inter_token_latency_seconds_count")
    assert generated - accepted - len(finals) <= intervals <= generated - accepted
