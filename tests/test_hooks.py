"""Every hook is called with its documented arguments, and one failing plugin stays isolated."""

from __future__ import annotations

import types

import pytest

from pyagent_core import (
    AttentionSpec,
    EvictionSpec,
    GrammarSpec,
    ProposerSpec,
    ReasoningParserSpec,
    SamplerSpec,
    ToolParserSpec,
    hookimpl,
)
from pyagent_core.registry import Registry

RECORDS = {
    "pyagent_register_attention_backends": AttentionSpec(name="a", impl="m:A"),
    "pyagent_register_samplers": SamplerSpec(name="s", impl="m:S"),
    "pyagent_register_grammar_backends": GrammarSpec(name="g", impl="m:G"),
    "pyagent_register_proposers": ProposerSpec(name="p", impl="m:P"),
    "pyagent_register_eviction_policies": EvictionSpec(name="e", impl="m:E"),
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


class Exploder:
    """Raises from every lifecycle hook."""

    @hookimpl
    def pyagent_engine_started(self, engine):
        raise RuntimeError("boom")

    @hookimpl
    def pyagent_step_finished(self, engine, stats):
        raise RuntimeError("boom")


@pytest.mark.parametrize(
    ("hook", "kwargs"),
    [
        ("pyagent_engine_started", {"engine": "E"}),
        ("pyagent_engine_stopped", {"engine": "E"}),
        ("pyagent_request_added", {"engine": "E", "request": "R"}),
        ("pyagent_request_finished", {"engine": "E", "request": "R", "reason": "stop"}),
        ("pyagent_step_finished", {"engine": "E", "stats": {"tokens": 3}}),
        ("pyagent_register_commands", {"app": "APP"}),
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
