"""Scheduling policies in the engine: every policy loses nothing, a failing policy falls back to fcfs,
request fields are validated, and greedy tokens do not depend on the policy (only timing does)."""

from __future__ import annotations

import json
import re
import warnings
from collections.abc import Mapping
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pyagent_core.errors import ConfigError, RequestError, UnknownBackendError
from pyagent_core.interfaces.scheduler import RequestView, SchedulerContext, SchedulerState, SchedulingPolicy
from pyagent_core.kinds import SCHEDULER
from pyagent_core.registry import get_registry
from pyagent_engine.core.config import EngineConfig
from pyagent_engine.core.engine import Engine
from pyagent_engine.kv.block_pool import BlockPool
from pyagent_engine.kv.manager import KVCacheManager
from pyagent_engine.requests.params import SamplingParams
from pyagent_engine.requests.request import Request
from pyagent_engine.scheduling.policy import GuardedPolicy, build_scheduling_policy
from pyagent_engine.scheduling.scheduler import Scheduler
from pyagent_engine.testing.cli_batch import run_commands

from .test_engine_scheduler import simulate

CONTEXT = SchedulerContext(64, 4, 4, 64)
NAMES = sorted(b.name for b in get_registry().backends(SCHEDULER) if not b.spec.uses_cached_prefix)


def policy(name: str, **options: Any) -> GuardedPolicy:
    return build_scheduling_policy(get_registry(), name, options, CONTEXT, prefix_caching=False)[0]


def make(index: int, prompt: int, out: int, **fields: Any) -> Request:
    return Request(f"r{index}", list(range(prompt)), SamplingParams(max_tokens=out, **fields))


request_fields = st.fixed_dictionaries({
    "priority": st.integers(-2, 2), "tenant": st.sampled_from([None, "a", "b", "c"]),
    "deadline_s": st.one_of(st.none(), st.floats(0.001, 5.0)),
})


@pytest.mark.parametrize("name", NAMES)
@settings(max_examples=25, deadline=None)
@given(workload=st.lists(st.tuples(st.integers(1, 40), st.integers(1, 12), request_fields), min_size=1, max_size=10),
       spare=st.integers(0, 12), max_seqs=st.integers(1, 4))
def test_every_request_finishes_under_every_policy(name, workload, spare, max_seqs):
    largest = max(-(-(p + o) // 4) for p, o, _ in workload)
    scheduler = Scheduler(KVCacheManager(BlockPool(largest + spare), 4), max_seqs, 32, policy(name))
    requests = [make(i, p, o, **fields) for i, (p, o, fields) in enumerate(workload)]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a shipped policy never needs the fallback
        simulate(scheduler, requests)
    assert all(len(r.output_token_ids) == r.params.max_tokens for r in requests)
    assert all(r.num_served_tokens >= r.num_tokens - 1 for r in requests)


def run_out_of_blocks(name: str) -> tuple[Request, Request, tuple[Request, ...]]:
    """A low-priority request admitted first, a high-priority one after; then both need more blocks
    than the pool has: the step's preempted requests."""
    scheduler = Scheduler(KVCacheManager(BlockPool(4), 4), 4, 64, policy(name))
    low, high = make(0, 4, 8, priority=5), make(1, 4, 8, priority=1)
    scheduler.add(low)
    scheduler.schedule()
    low.num_computed_tokens, low.output_token_ids = 4, [0]
    scheduler.add(high)
    assert [c.request for c in scheduler.schedule().chunks] == [low, high]
    for request in (low, high):  # each now needs a third block; one is free
        request.output_token_ids = [0] * 5
        request.num_computed_tokens = request.num_tokens - 1
    return low, high, scheduler.schedule().preempted


def test_priority_preempts_the_least_urgent_request_where_fcfs_preempts_the_newest():
    low, _, preempted = run_out_of_blocks("priority")
    assert preempted == (low,)
    _, high, preempted = run_out_of_blocks("fcfs")
    assert preempted == (high,)


class Raising(SchedulingPolicy):
    """Fails every other order() call and every finished() call; names a waiting request as victim."""

    calls = 0

    def order(self, state: SchedulerState) -> list[str]:
        Raising.calls += 1
        if Raising.calls % 2:
            raise RuntimeError("policy bug")
        return [v.request_id for v in reversed(state.waiting)]

    def victim(self, state: SchedulerState) -> str:
        return "nobody"

    def finished(self, view: RequestView) -> None:
        raise KeyError(view.request_id)


def test_a_failing_policy_falls_back_to_fcfs_for_that_step_and_loses_nothing():
    scheduler = Scheduler(KVCacheManager(BlockPool(6), 4), 2, 16, GuardedPolicy(Raising({}, CONTEXT), "raising"))
    requests = [make(i, 9, 6) for i in range(5)]
    with pytest.warns(UserWarning) as caught:
        simulate(scheduler, requests)
    messages = {str(w.message) for w in caught}
    assert "scheduling policy 'raising' raised RuntimeError: policy bug in order(); first come, first served " \
           "decides this step instead" in messages
    assert any("returned 'nobody', which is not a running request in victim(); the request admitted last is "
               "preempted instead" in m for m in messages)
    assert any("raised KeyError" in m and "in finished(); the policy was not told" in m for m in messages)
    assert all(len(r.output_token_ids) == 6 for r in requests)


class FailsToStart(SchedulingPolicy):
    """A policy whose constructor raises."""

    def __init__(self, options: Mapping[str, Any], context: SchedulerContext) -> None:
        raise RuntimeError("no config file")

    def order(self, state: SchedulerState) -> list[str]:
        raise AssertionError("never built")


def test_a_policy_that_fails_to_start_is_reported_and_fcfs_schedules(monkeypatch):
    registry = get_registry()
    monkeypatch.setattr(registry, "load", lambda backend: FailsToStart)
    with pytest.warns(UserWarning, match="scheduling policy 'fair' failed to start: RuntimeError: no config file; "
                      "first come, first served schedules every step instead"):
        guarded, selection = build_scheduling_policy(registry, "fair", {}, CONTEXT, prefix_caching=False)
    assert selection is None and guarded.policy is None
    requests = [make(i, 9, 3) for i in range(4)]
    simulate(Scheduler(KVCacheManager(BlockPool(16), 4), 2, 16, guarded), requests)
    assert all(len(r.output_token_ids) == 3 for r in requests)


def test_unknown_policy_and_lpm_without_prefix_caching_are_rejected():
    with pytest.raises(UnknownBackendError, match="sjf"):
        policy("sjf")
    with pytest.raises(ConfigError, match="scheduler 'lpm' orders by cached prefix and needs prefix caching"):
        build_scheduling_policy(get_registry(), "lpm", {}, CONTEXT, prefix_caching=False)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"priority": 1.5}, "priority must be an integer (smaller goes first), got 1.5"),
        ({"priority": True}, "priority must be an integer"),
        ({"deadline_s": -1.0}, "a deadline at or before the request's arrival is already past"),
        ({"deadline_s": 0}, "deadline_s is 0"),
        ({"deadline_s": "soon"}, "deadline_s must be a number of seconds after arrival or None, got 'soon'"),
        ({"tenant": 7}, "tenant must be a non-empty string or None, got 7"),
        ({"tenant": ""}, "tenant must be a non-empty string or None"),
    ],
)
def test_bad_scheduling_fields_are_rejected(fields: Mapping[str, Any], message: str):
    with pytest.raises(RequestError, match=re.escape(message)):
        SamplingParams(**fields)


def test_greedy_tokens_are_the_same_under_every_policy(engine_factory):
    """Scheduling changes timing, never tokens: a tight KV cache forces preemptions under every policy."""
    llm = engine_factory("float32", kv_cache_gib=0.004, max_num_seqs=3, max_num_batched_tokens=48)
    prompts = [llm.encode(p, chat=True)[0] for p in ("Name a color.", "What is 2+2?", "Say hi.", "Count to 3.")]
    fields = [{"priority": 2, "tenant": "a"}, {"priority": 0, "tenant": "b", "deadline_s": 0.5},
              {"priority": 1, "tenant": "a"}, {"priority": 0, "deadline_s": 5.0}]
    params = [SamplingParams(temperature=0, max_tokens=12, ignore_eos=True, **f) for f in fields]
    outputs, preemptions = {}, 0
    for name in [*NAMES, "lpm"]:
        config = EngineConfig(kv_cache_gib=0.004, max_num_seqs=3, max_num_batched_tokens=48, scheduler=name,
                              prefix_caching=name == "lpm")
        engine = Engine(llm.loaded, config=config)
        requests = [engine.add_request(ids, p) for ids, p in zip(prompts, params, strict=True)]
        while engine.has_unfinished():
            engine.step()
        assert engine.backends["scheduler"] == name
        outputs[name] = [r.output_token_ids for r in requests]
        preemptions += sum(r.num_preemptions for r in requests)
        assert all(r.finish_reason == "length" for r in requests), [r.error for r in requests]
    assert preemptions > 0, "the cache was not tight enough to preempt"
    assert all(tokens == outputs["fcfs"] for tokens in outputs.values()), outputs
    llm.close()


def test_cli_takes_the_scheduler_and_each_line_s_fields(tmp_path):
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text('{"prompt": "hi", "priority": "high"}\n'
                       '{"prompt": "Say hi.", "tenant": "a", "priority": -1, "deadline_s": 3}\n', encoding="utf-8")
    result, unknown, chat = run_commands([
        ("generate", "--input", str(prompts), "--max-tokens", "2", "--json", "--scheduler", "fair", "--scheduler-opt",
         "output_weight=3"),
        ("generate", "hi", "--max-tokens", "1", "--scheduler", "sjf"),
        ("chat", "--max-tokens", "1", "--scheduler", "sjf")], cwd=tmp_path)  # chat refuses before reading stdin
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert f"{prompts}:1: priority must be an integer (smaller goes first), got 'high'" in result.stderr
    records = [json.loads(line) for line in result.stdout.splitlines()]
    assert [r["finish_reason"] for r in records] == ["error", "length"]
    assert records[1]["backends"]["scheduler"] == "fair"
    assert unknown.returncode == 2
    assert "no scheduler backend named 'sjf'; choose one of: edf, fair, fcfs" in unknown.stderr
    assert chat.returncode == 2 and "Traceback" not in chat.stderr
    assert "no scheduler backend named 'sjf'; choose one of: edf, fair, fcfs" in chat.stderr
