"""Spec records validate on construction, so a malformed registration fails in its own plugin."""

from __future__ import annotations

import attrs
import pytest

from pyagent_core import GrammarSpec, MixerSpec, ModelSpec, OptionSpec, SamplerSpec
from pyagent_core.errors import SpecError, UnknownKindError
from pyagent_core.kinds import KINDS, get_kind


@pytest.mark.parametrize("name", ["", "Top_K", "top k", "dist:name", "-x"])
def test_bad_names(name):
    with pytest.raises(SpecError, match="backend name"):
        SamplerSpec(name=name, impl="a.b:C")


@pytest.mark.parametrize("impl", ["a.b", "a.b:", ":C", "a b:C", "a.b:C:D"])
def test_bad_impl_paths(impl):
    with pytest.raises(SpecError, match="impl path"):
        SamplerSpec(name="x", impl=impl)


def test_records_are_frozen_and_options_read_only():
    spec = SamplerSpec(name="x", impl="a:B", options={"k": int}, requires="torch")
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        spec.name = "y"  # type: ignore[misc]
    with pytest.raises(TypeError):
        spec.options["k"] = OptionSpec(type=str)  # type: ignore[index]
    assert spec.requires == ("torch",)


def test_capabilities_are_the_kind_specific_fields():
    spec = GrammarSpec(name="g", impl="a:B", constraint_kinds=("regex",), jump_forward=True)
    assert spec.capabilities() == {"constraint_kinds": ("regex",), "grammar_dialects": (),
                                   "jump_forward": True, "rollback": False, "ignored_keywords": (),
                                   "refused_keywords": (), "enforced_formats": ()}


def test_unknown_constraint_kind():
    with pytest.raises(SpecError, match="unknown constraint kinds \\['regexp'\\]"):
        GrammarSpec(name="g", impl="a:B", constraint_kinds=("regexp",))


def test_every_kind_has_a_record_and_hook():
    for kind in KINDS.values():
        assert kind.spec_type.kind == kind.name
        assert kind.hook.startswith("pyagent_register_")


@pytest.mark.parametrize(("alias", "kind"), [("samplers", "sampler"), ("tool-parser", "tool_parser"),
                                             ("KVCACHE", "eviction"), ("spec_decode", "proposer"),
                                             ("scheduling", "scheduler"), ("models", "model"),
                                             ("mixers", "mixer")])
def test_kind_aliases(alias, kind):
    assert get_kind(alias).name == kind


def test_unknown_kind_lists_the_kinds():
    with pytest.raises(UnknownKindError, match="unknown component kind 'sampeler'; choose one of: attention"):
        get_kind("sampeler")


def test_model_spec_names_an_architecture_and_says_what_it_serves():
    with pytest.raises(SpecError, match="model 'm' names no architecture"):
        ModelSpec(name="m", impl="a:B")
    spec = ModelSpec(name="qwen2", impl="a:B", architectures="Qwen2ForCausalLM", gguf_architectures="qwen2")
    assert spec.architectures == ("Qwen2ForCausalLM",)
    assert spec.serves(hf=["Qwen2ForCausalLM"]) and spec.serves(gguf="qwen2")
    assert not spec.serves(hf=["LlamaForCausalLM"], gguf="llama")


@pytest.mark.parametrize("families", [(), ("ssd", "linear_attention")])
def test_mixer_spec_names_known_families(families):
    with pytest.raises(SpecError, match=r"declares families .*; name at least one, each of: short_conv, ssd"):
        MixerSpec(name="x", impl="a:B", families=families)
    spec = MixerSpec(name="x", impl="a:B", families="ssd")
    assert spec.families == ("ssd",) and spec.capabilities() == {"families": ("ssd",), "dtypes": ("float32",)}
