"""``pyagent bench scheduling``: arrival-timed workloads replayed through the engine under each policy.

Two workloads of ``requests`` requests each, both with two priority classes (a quarter of the
requests at priority 0, the rest at 1), four tenants (``t0`` sends 70% of the requests, ``t1``-``t3``
10% each) and first-token deadlines on half of the requests:

- ``mooncake``: the first requests of the Mooncake conversation trace (``../shared/data/mooncake``),
  scaled to this machine: each 512-token hash block of the trace becomes a 16-token block (so
  requests that share hash ids share prompt prefixes, and a prompt is ``input_length / 32`` tokens,
  at most ``max_prompt``), outputs ``output_length / 16`` tokens (2 to ``max_output``), and the
  arrival times compressed so that the offered load is ``load`` (0.9) of the capacity measured below.
- ``synthetic``: prompts of 32 to 256 random tokens and outputs of 4 to 32, Poisson arrivals at
  ``synthetic_load`` (3.0: a burst so large that every tenant, even one sending 10% of the
  requests, asks for more than a quarter of the capacity, so a fair share is visible).

Capacity is measured first: every mooncake request submitted at once under ``fcfs``; tokens
computed (prompt plus output) per second of that run is what the engine sustains here. A deadline is
2 to 8 times the mean time the engine needs per request at that capacity.

Every policy replays each workload on a new engine over the same loaded model (same KV cache and
batch sizes, prefix caching on, so ``lpm`` has its cache), one after the other, and ``fcfs`` once
more at the end (``fcfs again``): how far that repeat lands from the first ``fcfs`` run is the
run-to-run noise of the machine, against which the differences between policies are to be read.
Replays are open loop: a request is added when its
arrival time comes, the engine steps while there is work. Reported per policy: time to first token
p50 and p99 per priority class (from the scheduled arrival), the deadline miss rate (requests with a
deadline whose first token came later), two Jain's fairness indices of the service the four tenants
received during the steps when all four had a request waiting or running (service weighted as the
``fair`` policy weighs it: 1 per prompt token computed, 2 per generated token), and throughput:
generated tokens per second of wall time from the first arrival to the last finish, and per second
of this process's CPU time over the same span (``cpu``: what a policy costs in work, much less moved
by other processes sharing the machine than wall time is), each with its ratio to ``fcfs``.

The two fairness indices:

- ``jain_contended``: Jain's index of the service itself, as if each tenant were owed a quarter.
- ``jain_fair_share``: Jain's index of each tenant's service divided by its max-min fair share,
  the form Jain, Chiu and Hawe give for allocations whose fair value is not equal ("A Quantitative
  Measure of Fairness", 1984, x_i = T_i / O_i). Each step's fair shares divide the service the step
  delivered by water-filling over what each tenant could have used in it: the tokens its unfinished
  requests still had to compute (a decoding request one token, a waiting or prefilling one the rest
  of its prompt less what the prefix cache holds, at most the step's token budget), weighted as the
  service is. This is the fairness VTC is built for ("Fairness in Serving Large Language Models",
  OSDI 2024): it bounds the service gap between *backlogged* clients and owes a client that asks for
  less than an equal share only what it asks for (its artifact's fairness metric credits each client
  the smaller of the largest service and its own demand). With four tenants of which three send 10%
  of the requests, a light tenant often has one request left, decoding one token a step; the first
  index counts that as unfairness no scheduler could remove, the second does not, while a light
  tenant kept waiting behind the heavy one still lowers both.
"""

from __future__ import annotations

import json
import random
import statistics
import time
from collections.abc import Sequence
from typing import Any

import attrs

from pyagent_engine.benchmarks.shared_data import SHARED_DATA

TENANTS = ("t0", "t1", "t2", "t3")
TENANT_WEIGHTS = (0.7, 0.1, 0.1, 0.1)
MOONCAKE = SHARED_DATA / "mooncake" / "conversation_trace.jsonl"


@attrs.frozen(kw_only=True)
class SchedulingBenchSettings:
    """What the benchmark runs (see the module docstring)."""

    requests: int = 32
    policies: tuple[str, ...] = ("fcfs", "priority", "lpm", "edf", "fair", "hrrn")
    load: float = 0.9
    synthetic_load: float = 3.0
    max_prompt: int = 384
    max_output: int = 32
    max_num_seqs: int = 8
    max_num_batched_tokens: int = 256
    kv_cache_gib: float = 0.25
    seed: int = 0


@attrs.frozen
class Arrival:
    """One request of a workload: when it arrives (seconds from the start) and what it carries."""

    time: float
    prompt: tuple[int, ...]
    max_tokens: int
    priority: int
    tenant: str
    deadline_s: float | None

    @property
    def work(self) -> int:
        """Tokens the engine computes for it."""
        return len(self.prompt) + self.max_tokens


def _labels(rng: random.Random) -> tuple[int, str, bool]:
    """A request's priority, tenant and whether it has a deadline."""
    return (0 if rng.random() < 0.25 else 1, rng.choices(TENANTS, TENANT_WEIGHTS)[0], rng.random() < 0.5)


def mooncake_shapes(settings: SchedulingBenchSettings, vocab: int) -> list[tuple[float, tuple[int, ...], int]]:
    """(trace time in s, prompt, max_tokens) of the first ``requests`` trace records, scaled (module docstring)."""
    shapes = []
    with MOONCAKE.open(encoding="utf-8") as trace:
        for line in trace:
            record = json.loads(line)
            length = min(settings.max_prompt, max(16, record["input_length"] // 32))
            prompt = [t for h in record["hash_ids"] for t in random.Random(h).choices(range(100, vocab), k=16)]
            output = min(settings.max_output, max(2, record["output_length"] // 16))
            shapes.append((record["timestamp"] / 1000, tuple(prompt[:length]), output))
            if len(shapes) == settings.requests:
                break
    return shapes


def _workload(shapes: Sequence[tuple[float, tuple[int, ...], int]], rate_scale: float, seconds_per_request: float,
              rng: random.Random) -> list[Arrival]:
    arrivals = []
    for when, prompt, output in shapes:
        priority, tenant, has_deadline = _labels(rng)
        deadline = rng.uniform(2, 8) * seconds_per_request if has_deadline else None
        arrivals.append(Arrival(when * rate_scale, prompt, output, priority, tenant, deadline))
    return arrivals


def mooncake_workload(shapes: Sequence[tuple[float, tuple[int, ...], int]], tokens_per_s: float, load: float,
                      seed: int) -> list[Arrival]:
    """The trace's arrivals compressed so the offered load is ``load`` of ``tokens_per_s``."""
    work = sum(len(p) + o for _, p, o in shapes)
    span = max(t for t, _, _ in shapes) - min(t for t, _, _ in shapes)
    target_span = work / (load * tokens_per_s)  # seconds over which the work arrives at that load
    first = min(t for t, _, _ in shapes)
    scaled = [(t - first, p, o) for t, p, o in shapes]
    return _workload(scaled, target_span / span if span > 0 else 0.0, work / len(shapes) / tokens_per_s,
                     random.Random(seed))


def synthetic_workload(settings: SchedulingBenchSettings, tokens_per_s: float, vocab: int) -> list[Arrival]:
    """Random lengths and Poisson arrivals at ``synthetic_load`` of ``tokens_per_s``."""
    rng = random.Random(settings.seed + 1)
    shapes = [(0.0, tuple(rng.choices(range(100, vocab), k=rng.randint(32, 256))), rng.randint(4, 32))
              for _ in range(settings.requests)]
    mean_work = sum(len(p) + o for _, p, o in shapes) / len(shapes)
    rate = settings.synthetic_load * tokens_per_s / mean_work  # requests per second
    clock, timed = 0.0, []
    for _, prompt, output in shapes:
        timed.append((clock, prompt, output))
        clock += rng.expovariate(rate)
    return _workload(timed, 1.0, mean_work / tokens_per_s, rng)


def jain(values: Sequence[float]) -> float | None:
    """Jain's fairness index (1: all equal, 1/n: one gets everything); ``None`` without service."""
    total = sum(values)
    return total * total / (len(values) * sum(v * v for v in values)) if total > 0 else None


def _percentile(values: Sequence[float], q: float) -> float | None:
    if not values:
        return None
    ranked = sorted(values)
    return ranked[min(len(ranked) - 1, round(q * (len(ranked) - 1)))]


def _service(request: Any) -> int:
    outputs = len(request.output_token_ids)
    return max(0, request.num_served_tokens - outputs) + 2 * outputs


def step_demand(request: Any, budget: int, cached: int) -> int:
    """The most weighted service ``request`` could get in one step of ``budget`` tokens (``cached``:
    prompt tokens the prefix cache would give it now): what is left to compute, plus one for a token
    sampled at its end (a generated token weighs 2, its computation 1)."""
    left = max(1, request.num_tokens - request.num_computed_tokens - cached)
    return min(left, budget) + (left <= budget)


def max_min_shares(total: float, demands: dict[str, float]) -> dict[str, float]:
    """Water-filling: ``total`` split as equally as the ``demands`` allow, none getting more than it asks."""
    shares = dict.fromkeys(demands, 0.0)
    left, unsaturated = float(total), sorted(demands, key=demands.__getitem__)
    while unsaturated and left > 0:
        level = left / len(unsaturated)
        tenant = unsaturated[0]
        if demands[tenant] > level:
            for other in unsaturated:
                shares[other] = level
            break
        shares[tenant] = float(demands[tenant])
        left -= demands[tenant]
        unsaturated.pop(0)
    return shares


def _demands(engine: Any, budget: int) -> dict[str, float]:
    scheduler = engine.scheduler
    cache = scheduler.kv.prefix_cache
    demands = dict.fromkeys(TENANTS, 0.0)
    for request in scheduler.waiting:
        cached = cache.match_length(request) if cache is not None and not request.num_computed_tokens else 0
        demands[request.params.tenant] += step_demand(request, budget, cached)
    for request in scheduler.running:
        demands[request.params.tenant] += step_demand(request, budget, 0)
    return demands


def replay(engine: Any, arrivals: Sequence[Arrival]) -> dict[str, Any]:
    """Replay ``arrivals`` open loop through ``engine``; the figures of one policy on one workload."""
    from pyagent_engine.requests.params import SamplingParams

    pending = sorted(arrivals, key=lambda a: a.time)
    added: list[tuple[Arrival, Any]] = []
    fair_service = dict.fromkeys(TENANTS, 0)
    fair_shares = dict.fromkeys(TENANTS, 0.0)
    start, cpu_start = time.perf_counter(), time.process_time()
    while pending or engine.has_unfinished():
        now = time.perf_counter() - start
        while pending and pending[0].time <= now:
            arrival = pending.pop(0)
            params = SamplingParams(temperature=0, max_tokens=arrival.max_tokens, ignore_eos=True,
                                    priority=arrival.priority, tenant=arrival.tenant, deadline_s=arrival.deadline_s)
            request = engine.add_request(list(arrival.prompt), params)
            request.arrival_time = start + arrival.time  # the replay's arrival, even if the last step ran late
            added.append((arrival, request))
        if not engine.has_unfinished():
            time.sleep(max(0.0, pending[0].time - (time.perf_counter() - start)))
            continue
        unfinished = [*engine.scheduler.waiting, *engine.scheduler.running]
        contended = {r.params.tenant for r in unfinished} >= set(TENANTS)
        before = {id(r): _service(r) for _, r in added}
        demands = _demands(engine, engine.config.max_num_batched_tokens) if contended else {}
        engine.step()
        if contended:
            delivered = dict.fromkeys(TENANTS, 0)
            for _, request in added:
                delivered[request.params.tenant] += _service(request) - before[id(request)]
            for tenant, share in max_min_shares(sum(delivered.values()), demands).items():
                fair_service[tenant] += delivered[tenant]
                fair_shares[tenant] += share
    end, cpu = max(r.finish_time for _, r in added), time.process_time() - cpu_start
    ttft = {0: [], 1: []}  # type: dict[int, list[float]]
    missed = with_deadline = 0
    for arrival, request in added:
        if request.first_token_time is None:  # failed: counted in "errors"
            continue
        first = request.first_token_time - (start + arrival.time)
        ttft[arrival.priority].append(first)
        if arrival.deadline_s is not None:
            with_deadline += 1
            missed += first > arrival.deadline_s
    generated = sum(len(r.output_token_ids) for _, r in added)
    return {
        "ttft_p50_s": {f"priority {p}": _percentile(v, 0.5) for p, v in ttft.items()},
        "ttft_p99_s": {f"priority {p}": _percentile(v, 0.99) for p, v in ttft.items()},
        "deadline_miss_rate": missed / with_deadline if with_deadline else None,
        "jain_contended": jain(list(fair_service.values())),
        "contended_service": fair_service,
        "jain_fair_share": jain([fair_service[t] / fair_shares[t] for t in TENANTS if fair_shares[t] > 0]),
        "contended_fair_shares": fair_shares,
        "throughput_tok_s": generated / (end - start - min(a.time for a in arrivals)),
        "throughput_cpu_tok_s": generated / cpu,
        "errors": sum(r.error is not None for _, r in added),
        "preemptions": sum(r.num_preemptions for _, r in added),
    }


def run_scheduling_benchmark(settings: SchedulingBenchSettings, loaded: Any = None) -> dict[str, Any]:
    """Measure capacity, build both workloads, replay them under every policy; the report."""
    import torch

    from pyagent_engine.core.config import EngineConfig
    from pyagent_engine.core.engine import Engine
    from pyagent_engine.models.loader import load_model

    loaded = loaded or load_model(None, "float32")
    vocab = loaded.config.vocab_size

    def engine(policy: str) -> Any:
        return Engine(loaded, config=EngineConfig(
            kv_cache_gib=settings.kv_cache_gib, max_num_seqs=settings.max_num_seqs,
            max_num_batched_tokens=settings.max_num_batched_tokens, prefix_caching=True, scheduler=policy))

    shapes = mooncake_shapes(settings, vocab)
    calibration = engine("fcfs")
    replay(calibration, [Arrival(0.0, p, o, 1, "t0", None) for _, p, o in shapes[:4]])  # warm up
    started = time.perf_counter()
    burst = replay(calibration, [Arrival(0.0, p, o, 1, "t0", None) for _, p, o in shapes])
    capacity = sum(len(p) + o for _, p, o in shapes) / (time.perf_counter() - started)
    calibration.close()
    workloads = {"mooncake": mooncake_workload(shapes, capacity, settings.load, settings.seed),
                 "synthetic": synthetic_workload(settings, capacity, vocab)}
    results: dict[str, dict[str, Any]] = {name: {} for name in workloads}
    for name, arrivals in workloads.items():
        for label, policy in [*((p, p) for p in settings.policies), ("fcfs again", "fcfs")]:
            runner = engine(policy)
            results[name][label] = replay(runner, arrivals)
            runner.close()
        base = results[name].get("fcfs")
        for figures in results[name].values():
            for key in ("throughput_tok_s", "throughput_cpu_tok_s"):
                figures[key.replace("_tok_s", "_vs_fcfs")] = figures[key] / base[key] if base else None
    return {
        "benchmark": "scheduling",
        "settings": attrs.asdict(settings),
        "capacity_tokens_per_s": capacity,
        "calibration_preemptions": burst["preemptions"],
        "workloads": {name: {"requests": len(a), "span_s": max(x.time for x in a),
                             "prompt_tokens_mean": statistics.mean(len(x.prompt) for x in a),
                             "output_tokens_mean": statistics.mean(x.max_tokens for x in a),
                             "with_deadline": sum(x.deadline_s is not None for x in a),
                             "priority_0": sum(x.priority == 0 for x in a)} for name, a in workloads.items()},
        "torch_threads": torch.get_num_threads(),
        "results": results,
    }
