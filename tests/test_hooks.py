"""Every hook is called with its documented arguments, and one failing plugin stays isolated."""

from __future__ import annotations

import types

import attrs
import pytest

from pyagent_core import (
    AttentionSpec,
    EvictionSpec,
    GrammarSpec,
    MixerSpec,
    ModelSpec,
    ProposerSpec,
    ReasoningParserSpec,
    SamplerSpec,
    SchedulerSpec,
    ToolParserSpec,
    hookimpl,
)
from pyagent_core.records import DoctorCheck, EngineInfo, RequestInfo, StepStats
from pyagent_core.registry import Registry

RECORDS = {
    "pyagent_register_attention_backends": AttentionSpec(name="a", impl="m:A"),
    "pyagent_register_mixers": MixerSpec(name="x", impl="m:X", families=("ssd",)),
    "pyagent_register_samplers": SamplerSpec(name="s", impl="m:S"),
    "pyagent_register_grammar_backends": GrammarSpec(name="g", impl="m:G"),
    "pyagent_register_proposers": ProposerSpec(name="p", impl="m:P"),
    "pyagent_register_eviction_policies": EvictionSpec(name="e", impl="m:E"),
    "pyagent_register_schedulers": SchedulerSpec(name="q", impl="m:Q"),
    "pyagent_register_models": ModelSpec(name="m", impl="m:M", gguf_architectures=("m",)),
    "pyagent_register_tool_parsers": ToolParserSpec(name="t", impl="m:T"),
    "pyagent_register_reasoning_parsers": ReasoningParserSpec(name="r", impl="m:R"),
}


def registering_plugin() -> types.ModuleType:
    """A plugin module implementing every registration hook."""
    module = types.ModuleType("registering_plugin")
    for hook, record in RECORDS.items():
        def impl(register, _record=record):
            register(_record)
        impl.__name__ = hook
        setattr(module, hook, hookimpl(impl))
    return module


def test_every_registration_hook_registers_its_kind():
    registry = Registry(environ={}, entry_points=[], plugins=[("all", registering_plugin())])
    for record in RECORDS.values():
        (backend,) = registry.backends(record.kind)
        assert backend.spec is record and backend.plugin == "all"
    assert registry.plugins()[0].kinds == tuple(r.kind for r in RECORDS.values())


class Recorder:
    """Implements every lifecycle hook and records the arguments it got."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict]] = []

    @hookimpl
    def pyagent_engine_started(self, engine):
        self.calls.append(("pyagent_engine_started", {"engine": engine}))

    @hookimpl
    def pyagent_engine_stopped(self, engine):
        self.calls.append(("pyagent_engine_stopped", {"engine": engine}))

    @hookimpl
    def pyagent_request_added(self, engine, request):
        self.calls.append(("pyagent_request_added", {"engine": engine, "request": request}))

    @hookimpl
    def pyagent_request_finished(self, engine, request, reason):
        self.calls.append(("pyagent_request_finished", {"request": request, "reason": reason}))

    @hookimpl
    def pyagent_step_finished(self, engine, stats):
        self.calls.append(("pyagent_step_finished", {"stats": stats}))

    @hookimpl
    def pyagent_register_commands(self, app):
        self.calls.append(("pyagent_register_commands", {"app": app}))

    @hookimpl
    def pyagent_doctor_checks(self):
        self.calls.append(("pyagent_doctor_checks", {}))
        return [DoctorCheck("recorder", True, "fine")]


class Exploder:
    """Raises from every lifecycle hook."""

    @hookimpl
    def pyagent_engine_started(self, engine):
        raise RuntimeError("boom")

    @hookimpl
    def pyagent_step_finished(self, engine, stats):
        raise RuntimeError("boom")

    @hookimpl
    def pyagent_doctor_checks(self):
        raise RuntimeError("boom")


ENGINE = EngineInfo(engine_id="engine-9", model="m.gguf", architecture="llama", dtype="float32", vocab_size=8,
                    max_model_len=64, block_size=16, num_kv_blocks=4, max_num_seqs=2, max_num_batched_tokens=32,
                    backends={"attention": "paged"})
REQUEST = RequestInfo(request_id="r1", prompt_token_ids=[1, 2], output_token_ids=[3], params={"top_k": 4})
STATS = StepStats(num_scheduled_tokens=3, num_prefill_tokens=2, num_decode_tokens=1, num_running=1, num_waiting=0,
                  num_preempted=0, kv_blocks_free=3, kv_blocks_total=4)


@pytest.mark.parametrize(
    ("hook", "kwargs"),
    [
        ("pyagent_engine_started", {"engine": ENGINE}),
        ("pyagent_engine_stopped", {"engine": ENGINE}),
        ("pyagent_request_added", {"engine": ENGINE, "request": REQUEST}),
        ("pyagent_request_finished", {"engine": ENGINE, "request": REQUEST, "reason": "stop"}),
        ("pyagent_step_finished", {"engine": ENGINE, "stats": STATS}),
        ("pyagent_register_commands", {"app": "APP"}),
        ("pyagent_doctor_checks", {}),
    ],
)
def test_lifecycle_hooks_reach_every_plugin_despite_a_failing_one(hook, kwargs):
    recorder = Recorder()
    registry = Registry(environ={}, entry_points=[], plugins=[("bad", Exploder()), ("rec", recorder)])
    failures = registry.call_hook(hook, **kwargs)
    assert [name for name, _ in recorder.calls] == [hook]
    if hasattr(Exploder, hook):
        assert [(name, str(exc)) for name, exc in failures] == [("bad", "boom")]
    else:
        assert failures == []


def test_records_are_frozen_snapshots():
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        REQUEST.output_token_ids = (9,)  # type: ignore[misc]
    with pytest.raises(TypeError):
        REQUEST.params["top_k"] = 5  # type: ignore[index]
    assert REQUEST.prompt_token_ids == (1, 2) and ENGINE.backends["attention"] == "paged"


def test_gather_hook_returns_each_plugins_rows_and_isolates_a_failing_one():
    registry = Registry(environ={}, entry_points=[], plugins=[("bad", Exploder()), ("rec", Recorder())])
    results, failures = registry.gather_hook("pyagent_doctor_checks")
    assert results == [("rec", [DoctorCheck("recorder", True, "fine")])]
    assert [(name, str(exc)) for name, exc in failures] == [("bad", "boom")]
