"""One Prometheus registry per engine, with vLLM's metric names under the ``pyagent:`` prefix.

The names, types, label names and histogram buckets are those of vLLM's v1 Prometheus logger
(``vllm:time_to_first_token_seconds`` becomes ``pyagent:time_to_first_token_seconds``), so a vLLM
dashboard works once its ``vllm:`` prefix is replaced. Every metric carries the labels ``model_name``
(the engine's model as given) and ``engine`` (its engine id). See ``docs/metrics.md``.

Where a figure comes from:

- scheduler gauges, token, prefix-cache, preemption and speculative counters: each step's
  :class:`~pyagent_core.records.StepStats` (counters there are the step's own);
- request histograms and ``request_success``: the :class:`~pyagent_core.records.RequestInfo` of each
  finished request, observed when it finishes. Inter-token latency is one observation per step that
  gave the request tokens (as vLLM does), so an accepted speculative draft is one interval.

LoRA: ``lora_requests_info`` is vLLM's gauge (labels ``max_lora``, ``waiting_lora_adapters``,
``running_lora_adapters``: comma-separated names; the value is when it was set), from each step's
``StepStats``; pyagent's own ``lora_request_success`` and ``lora_generation_tokens`` count finished
requests and their output tokens per adapter (label ``lora_name``), from each finished request's
``RequestInfo``. All three exist only when the engine serves adapters.

When no request is left in flight the gauges read 0 at once, even when the engine runs no further step
(a request aborted between steps).
"""

from __future__ import annotations

import itertools
import threading

import prometheus_client
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from pyagent_core.records import EngineInfo, RequestInfo, StepStats

PREFIX = "pyagent:"
LABELS = ("model_name", "engine")
FINISH_REASONS = ("stop", "length", "abort", "error")

TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
                40.0, 80.0, 160.0, 640.0, 2560.0)
"""vLLM's buckets of ``time_to_first_token_seconds``."""
ITL_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0,
               80.0)
"""vLLM's buckets of ``inter_token_latency_seconds``."""
REQUEST_LATENCY_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0,
                           240.0, 480.0, 960.0, 1920.0, 7680.0)
"""vLLM's buckets of the per-request phase times (end to end, queue, prefill, decode, inference)."""
ITERATION_TOKEN_BUCKETS = (1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)
"""vLLM's buckets of ``iteration_tokens_total``."""


def buckets_1_2_5(limit: int) -> list[int]:
    """1, 2, 5, 10, 20, 50, ... up to ``limit``: vLLM's buckets of token-count histograms."""
    buckets: list[int] = []
    scale = 1
    while True:
        for mantissa in (1, 2, 5):
            if mantissa * scale > limit:
                return buckets
            buckets.append(mantissa * scale)
        scale *= 10


def emission_intervals(token_times: tuple[float, ...]) -> list[float]:
    """Seconds between consecutive steps that appended tokens (tokens of one step share a time)."""
    steps = [t for i, t in enumerate(token_times) if i == 0 or t != token_times[i - 1]]
    return [later - earlier for earlier, later in itertools.pairwise(steps)]


class EngineMetrics:
    """The metrics of one engine in their own :class:`~prometheus_client.CollectorRegistry`.

    Args:
        engine: the engine they describe (its model, engine id, context length and backends).
    """

    def __init__(self, engine: EngineInfo) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.labels = (engine.model, engine.engine_id)
        self.in_flight: set[str] = set()
        self._lock = threading.Lock()
        token_buckets = buckets_1_2_5(engine.max_model_len)

        self.running = self._gauge("num_requests_running", "Number of requests in model execution batches.")
        self.waiting = self._gauge("num_requests_waiting", "Number of requests waiting to be processed.")
        self.kv_usage = self._gauge("kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.")
        self.state_usage = self._gauge("state_slots_usage_perc", "Recurrent-state slots held by running requests "
                                       "(models with state layers; 0 otherwise). 1 means 100 percent usage.")
        self.prefix_queries = self._counter("prefix_cache_queries",
                                            "Prefix cache queries, in terms of number of queried tokens.")
        self.prefix_hits = self._counter("prefix_cache_hits", "Prefix cache hits, in terms of number of cached tokens.")
        self.preemptions = self._counter("num_preemptions", "Cumulative number of preemption from the engine.")
        self.prompt_tokens = self._counter("prompt_tokens", "Number of prefill tokens processed.")
        self.generation_tokens = self._counter("generation_tokens", "Number of generation tokens processed.")
        success = Counter(PREFIX + "request_success", "Count of successfully processed requests.",
                          [*LABELS, "finished_reason"], registry=self.registry)
        self.success = {reason: success.labels(*self.labels, reason) for reason in FINISH_REASONS}

        self.iteration_tokens = self._histogram("iteration_tokens_total",
                                                "Histogram of number of tokens per engine_step.",
                                                ITERATION_TOKEN_BUCKETS)
        self.request_prompt_tokens = self._histogram("request_prompt_tokens", "Number of prefill tokens processed.",
                                                     token_buckets)
        self.request_generation_tokens = self._histogram("request_generation_tokens",
                                                         "Number of generation tokens processed.", token_buckets)
        self.max_tokens = self._histogram("request_params_max_tokens", "Histogram of the max_tokens request parameter.",
                                          token_buckets)
        self.ttft = self._histogram("time_to_first_token_seconds", "Histogram of time to first token in seconds.",
                                    TTFT_BUCKETS)
        self.itl = self._histogram("inter_token_latency_seconds", "Histogram of inter-token latency in seconds.",
                                   ITL_BUCKETS)
        self.e2e = self._histogram("e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.",
                                   REQUEST_LATENCY_BUCKETS)
        self.queue = self._histogram("request_queue_time_seconds",
                                     "Histogram of time spent in WAITING phase for request.", REQUEST_LATENCY_BUCKETS)
        self.inference = self._histogram("request_inference_time_seconds",
                                         "Histogram of time spent in RUNNING phase for request.",
                                         REQUEST_LATENCY_BUCKETS)
        self.prefill = self._histogram("request_prefill_time_seconds",
                                       "Histogram of time spent in PREFILL phase for request.", REQUEST_LATENCY_BUCKETS)
        self.decode = self._histogram("request_decode_time_seconds",
                                      "Histogram of time spent in DECODE phase for request.", REQUEST_LATENCY_BUCKETS)

        self.lora_info = Gauge(PREFIX + "lora_requests_info", "Running stats on lora requests.",
                               [*LABELS, "max_lora", "waiting_lora_adapters", "running_lora_adapters"],
                               registry=self.registry)
        self.lora_success = Counter(PREFIX + "lora_request_success", "Finished requests per LoRA adapter.",
                                    [*LABELS, "lora_name", "finished_reason"], registry=self.registry)
        self.lora_tokens = Counter(PREFIX + "lora_generation_tokens", "Generation tokens per LoRA adapter.",
                                   [*LABELS, "lora_name"], registry=self.registry)

        self.speculative = "proposer" in engine.backends  # vLLM registers these only with speculation on
        if self.speculative:
            self.drafts = self._counter("spec_decode_num_drafts", "Number of spec decoding drafts.")
            self.draft_tokens = self._counter("spec_decode_num_draft_tokens", "Number of draft tokens.")
            self.accepted_tokens = self._counter("spec_decode_num_accepted_tokens", "Number of accepted tokens.")

    def _gauge(self, name: str, documentation: str) -> Gauge:
        return Gauge(PREFIX + name, documentation, LABELS, registry=self.registry).labels(*self.labels)

    def _counter(self, name: str, documentation: str) -> Counter:
        return Counter(PREFIX + name, documentation, LABELS, registry=self.registry).labels(*self.labels)

    def _histogram(self, name: str, documentation: str, buckets: tuple[float, ...] | list[int]) -> Histogram:
        return Histogram(PREFIX + name, documentation, LABELS, buckets=buckets,
                         registry=self.registry).labels(*self.labels)

    def request_added(self, request: RequestInfo) -> None:
        """Note ``request`` as in flight."""
        with self._lock:
            self.in_flight.add(request.request_id)

    def request_finished(self, request: RequestInfo, reason: str) -> None:
        """Observe the finished request's latencies and sizes; zero the gauges when none is left."""
        self.success.get(reason, self.success["error"]).inc()
        if request.lora_name is not None:
            self.lora_success.labels(*self.labels, request.lora_name,
                                     reason if reason in FINISH_REASONS else "error").inc()
            self.lora_tokens.labels(*self.labels, request.lora_name).inc(len(request.output_token_ids))
        self.request_prompt_tokens.observe(len(request.prompt_token_ids))
        self.request_generation_tokens.observe(len(request.output_token_ids))
        max_tokens = request.params.get("max_tokens")
        if max_tokens:
            self.max_tokens.observe(max_tokens)
        arrival, scheduled, first = request.arrival_time, request.scheduled_time, request.first_token_time
        if request.finish_time is not None:
            self.e2e.observe(request.finish_time - arrival)
        if scheduled is not None:
            self.queue.observe(scheduled - arrival)
        if first is not None:
            last = request.token_times[-1] if request.token_times else first
            self.ttft.observe(first - arrival)
            self.decode.observe(last - first)
            if scheduled is not None:
                self.prefill.observe(first - scheduled)
                self.inference.observe(last - scheduled)
        for interval in emission_intervals(request.token_times):
            self.itl.observe(interval)
        with self._lock:
            self.in_flight.discard(request.request_id)
            idle = not self.in_flight
        if idle:
            for gauge in (self.running, self.waiting, self.kv_usage, self.state_usage):
                gauge.set(0)

    def step_finished(self, stats: StepStats) -> None:
        """Set the scheduler gauges and add the step's counters."""
        self.running.set(stats.num_running)
        self.waiting.set(stats.num_waiting)
        total = stats.kv_blocks_total
        self.kv_usage.set(1.0 - stats.kv_blocks_free / total if total else 0.0)
        slots = stats.state_slots_total
        self.state_usage.set(1.0 - stats.state_slots_free / slots if slots else 0.0)
        self.prefix_queries.inc(stats.prefix_cache_queried_tokens)
        self.prefix_hits.inc(stats.prefix_cache_hit_tokens)
        self.preemptions.inc(stats.num_preempted)
        self.prompt_tokens.inc(stats.num_prompt_tokens)
        self.generation_tokens.inc(stats.num_generation_tokens)
        self.iteration_tokens.observe(stats.num_prompt_tokens + stats.num_generation_tokens)
        if stats.max_lora:
            self.lora_info.clear()  # one series: the latest step's adapters
            self.lora_info.labels(*self.labels, str(stats.max_lora), ",".join(stats.waiting_lora_adapters),
                                  ",".join(stats.running_lora_adapters)).set_to_current_time()
        if self.speculative:
            self.drafts.inc(stats.num_drafts)
            self.draft_tokens.inc(stats.num_draft_tokens)
            self.accepted_tokens.inc(stats.num_accepted_tokens)

    def exposition(self) -> bytes:
        """The registry in Prometheus' text format."""
        return prometheus_client.generate_latest(self.registry)


_engines: dict[str, EngineMetrics] = {}
CONTENT_TYPE = prometheus_client.CONTENT_TYPE_LATEST
"""The ``Content-Type`` of :func:`exposition`'s body."""


def start(engine: EngineInfo) -> EngineMetrics:
    """Create (or replace) the metrics of ``engine``."""
    _engines[engine.engine_id] = metrics = EngineMetrics(engine)
    return metrics


def stop(engine: EngineInfo) -> None:
    """Forget the metrics of ``engine``."""
    _engines.pop(engine.engine_id, None)


def of(engine_id: str) -> EngineMetrics | None:
    """The metrics of the running engine ``engine_id``, or ``None`` (not started, stopped, or the plugin is off)."""
    return _engines.get(engine_id)


def exposition(engine_id: str) -> tuple[bytes, str] | None:
    """``(body, content type)`` for ``GET /metrics`` of engine ``engine_id``; ``None`` when it has no metrics
    (the metrics plugin is disabled or the engine has stopped)."""
    metrics = of(engine_id)
    return None if metrics is None else (metrics.exposition(), CONTENT_TYPE)
