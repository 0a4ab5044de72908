"""Prefix caching on the real model: greedy outputs never change (through hits, evictions, preemptions and
the offload tier), salts isolate, the skip switch bypasses, and the CLI reports cached prompt tokens."""

from __future__ import annotations

import attrs
import pytest

from pyagent_core import hookimpl
from pyagent_core.registry import get_registry
from pyagent_engine.cli.generate import _record
from pyagent_engine.core.config import EngineConfig
from pyagent_engine.core.engine import Engine
from pyagent_engine.requests.params import SamplingParams

SYSTEM = ("You are the help desk of a small town library. Answer in one short sentence and never invent "
          "opening hours, fees or rules that you were not told about.")
QUESTIONS = ("Can I borrow two books?", "Is there a fee?", "Where is the desk?")
BLOCK_BYTES = 2 * 16 * 3 * 64 * 2 * 30  # K and V, 16 tokens, 3 kv heads of 64, bfloat16, 30 layers

pytestmark = pytest.mark.skipif(not any(b.name == "lru" for b in get_registry().available("eviction")),
                                reason="the lru eviction policy is not installed (plugins/kvcache)")


def serve(engine: Engine, prompts: list[list[int]], params: list[SamplingParams]) -> list:
    """Submit every prompt, step until all finish; final outputs in submission order."""
    requests = [engine.add_request(ids, p) for ids, p in zip(prompts, params, strict=True)]
    finals = {}
    while engine.has_unfinished():
        finals.update((o.request_id, o) for o in engine.step() if o.finished)
    return [finals[r.request_id] for r in requests]


class StepStats:
    """Sums the per-step counters of every step."""

    def __init__(self) -> None:
        self.total: dict = {}

    @hookimpl
    def pyagent_step_finished(self, engine, stats):
        for name, value in attrs.asdict(stats).items():
            if isinstance(value, (int, float)):  # not the LoRA adapters' names
                self.total[name] = self.total.get(name, 0) + value


@pytest.fixture(scope="module")
def shared_prompts(llm_bf16) -> list[list[int]]:
    messages = [[{"role": "system", "content": SYSTEM}, {"role": "user", "content": q}] for q in QUESTIONS]
    return [llm_bf16.encode(m)[0] for m in messages]


def test_greedy_outputs_match_the_uncached_engine_through_evictions_preemptions_and_offload(llm_bf16, shared_prompts):
    greedy = [SamplingParams(temperature=0, max_tokens=2)] * len(shared_prompts)
    reference = [o.output_token_ids for o in serve(llm_bf16.engine, shared_prompts, greedy)]
    config = EngineConfig(kv_cache_gib=5 * BLOCK_BYTES / 2**30, max_num_seqs=3, max_num_batched_tokens=32,
                          prefix_caching=True, eviction="lru", offload_blocks=16, scheduler="lpm")
    engine = Engine(llm_bf16.loaded, config=config)
    assert engine.num_blocks == 5 and engine.backends["eviction"] == "lru"
    stats = StepStats()
    engine.registry.pm.register(stats, name="prefix-cache-stats")
    try:
        first = serve(engine, shared_prompts, greedy)
        second = serve(engine, shared_prompts, greedy)  # cached or offloaded by now
    finally:
        engine.registry.pm.unregister(stats)
        engine.close()
    assert [o.output_token_ids for o in first] == reference
    assert [o.output_token_ids for o in second] == reference
    assert stats.total["num_preempted"] > 0, "the test meant to force preemption"
    assert stats.total["prefix_cache_evicted_blocks"] > 0 and stats.total["offload_blocks_loaded"] > 0
    assert all(o.num_cached_tokens >= 16 for o in second[1:])


def test_cache_salt_isolates_tenants_and_skip_bypasses_the_cache(llm_bf16, shared_prompts):
    engine = Engine(llm_bf16.loaded, config=EngineConfig(kv_cache_gib=0.02, prefix_caching=True, eviction="lru"))
    runs = [("a", False), ("b", False), ("a", False), (None, True), (None, False), (None, False)]
    outputs = [serve(engine, [shared_prompts[0]], [SamplingParams(temperature=0, max_tokens=1, cache_salt=salt,
                                                            skip_prefix_cache=skip)])[0] for salt, skip in runs]
    engine.close()
    cached = [o.num_cached_tokens for o in outputs]
    full = (len(shared_prompts[0]) - 1) // 16 * 16
    assert cached == [0, 0, full, 0, 0, full] and full > 0  # the skip request published nothing either
    assert len({tuple(o.output_token_ids) for o in outputs}) == 1
    record = _record(outputs[-1], engine.backends)
    assert record["cached_prompt_tokens"] == full and record["backends"]["eviction"] == "lru"


def test_a_bad_cache_flag_is_reported_without_traceback(cli, tmp_path):
    result = cli("generate", "hi", "--max-tokens", "1", "--prefix-caching", "--kv-hash", "md5", cwd=tmp_path)
    assert result.returncode == 2 and "unknown kv hash 'md5'; choose one of: sha256, xxhash, builtin" in result.stderr
    assert "Traceback" not in result.stderr
