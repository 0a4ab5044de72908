"""Meta-tests of the grammar kit: the scaffold's choice-only backend passes it, broken variants fail it.

Also checks the interface's own helpers: constraint validation and the bitmask utilities.
"""

from __future__ import annotations

import pytest
import torch

from pyagent_core.errors import SpecError
from pyagent_core.interfaces.grammar import (
    CompiledGrammar,
    ConstraintSpec,
    GrammarBackend,
    GrammarContext,
    GrammarMatcher,
    allocate_bitmask,
    allowed_tokens,
    apply_bitmask,
    bitmask_shape,
    set_row,
)
from pyagent_core.testing.grammar import GrammarConformance, greedy_tokenize, kit_tokenizer_info
from pyagent_core.testing.scaffolded import import_template

reference = import_template("grammar")
ChoiceGrammar = reference.impl.KitReference
ChoiceMatcher = reference.impl.ChoiceMatcher
CompiledChoice = reference.impl.CompiledChoice
# The scaffold's own conformance test, run here on the choice backend it scaffolds.
TestChoiceGrammar = reference.tests.TestKitReference


class NoEosMatcher(ChoiceMatcher):
    """Broken: never lets the output end."""

    def allows(self, token: int) -> bool:
        return token not in self.info.eos_token_ids and super().allows(token)


class PermissiveMatcher(ChoiceMatcher):
    """Broken: accept_token takes any token, whatever the bitmask says."""

    def accept_token(self, token_id: int) -> bool:
        self.tokens.append(token_id)
        return True


class StickyMatcher(ChoiceMatcher):
    """Broken: rollback() forgets only the end-of-sequence token."""

    def rollback(self, num_tokens: int) -> None:
        if self.is_terminated():
            self.tokens.pop()


class EagerJumpMatcher(ChoiceMatcher):
    """Broken: jump_forward() claims the first remaining choice is forced."""

    def jump_forward(self) -> str:
        text = self.text()
        rests = [c[len(text):] for c in self.choices if c.startswith(text)]
        return rests[0].decode() if rests and not self.is_terminated() else ""


class SharedMatcherGrammar(ChoiceGrammar):
    """Broken: every matcher() of a compiled grammar is the same object."""

    def compile(self, constraint: ConstraintSpec) -> CompiledGrammar:
        compiled = super().compile(constraint)
        shared = compiled.matcher()
        compiled.matcher = lambda: shared  # type: ignore[method-assign]
        return compiled


class OverclaimingGrammar(ChoiceGrammar):
    """Broken: says it supports every constraint kind."""

    def supports(self, constraint: ConstraintSpec) -> str | None:
        return None


def _backend_with(matcher_type: type[ChoiceMatcher]) -> type[GrammarBackend]:
    class Compiled(CompiledChoice):
        def matcher(self) -> GrammarMatcher:
            return matcher_type(self.info, self.choices)

    class Backend(ChoiceGrammar):
        def compile(self, constraint: ConstraintSpec) -> CompiledGrammar:
            return Compiled(self.tokenizer_info, [c.encode("utf-8") for c in constraint.choice or ()])

    return Backend


def _kit(impl: type[GrammarBackend]) -> GrammarConformance:
    return type(f"{impl.__name__}Kit", (TestChoiceGrammar,), {"impl": impl})()


@pytest.mark.parametrize(
    ("impl", "check"),
    [
        (_backend_with(NoEosMatcher), "test_accepted_strings"),
        (_backend_with(PermissiveMatcher), "test_rejected_strings"),
        (_backend_with(PermissiveMatcher), "test_bitmask_agrees_with_accept_token"),
        (_backend_with(StickyMatcher), "test_rollback_restores_state"),
        (_backend_with(EagerJumpMatcher), "test_jump_forward_is_forced_text"),
        (OverclaimingGrammar, "test_supports_answers_for_every_kind"),
        (SharedMatcherGrammar, "test_matchers_are_independent"),
    ],
)
def test_kit_catches_broken_backend(impl: type[GrammarBackend], check: str) -> None:
    with pytest.raises(AssertionError):
        getattr(_kit(impl), check)()


@pytest.mark.parametrize(
    "fields",
    [
        {},
        {"regex": "a", "choice": ["a"]},
        {"json_object": True, "json_schema": {"type": "object"}},
        {"choice": []},
    ],
)
def test_constraint_needs_exactly_one_kind(fields: dict[str, object]) -> None:
    with pytest.raises(SpecError):
        ConstraintSpec(**fields)  # type: ignore[arg-type]


def test_constraint_json_is_compact_keeps_key_order_and_hashable() -> None:
    a = ConstraintSpec(json_schema={"b": 1, "a": [1, 2]})
    b = ConstraintSpec(json_schema='{"b":1,"a":[1,2]}')
    assert a == b and hash(a) == hash(b) and a.kind == "json_schema"
    assert a != ConstraintSpec(json_schema={"a": [1, 2], "b": 1}), "property order is part of the constraint"


def test_bitmask_helpers_round_trip() -> None:
    assert bitmask_shape(2, 65) == (2, 3)
    bitmask = allocate_bitmask(2, 65)
    assert bitmask.dtype == torch.int32 and allowed_tokens(bitmask, 1, 65) == list(range(65))
    set_row(bitmask, 0, [0, 31, 32, 64])
    assert allowed_tokens(bitmask, 0, 65) == [0, 31, 32, 64]
    logits = torch.zeros(2, 65)
    apply_bitmask(logits, bitmask)
    assert logits[0].isfinite().nonzero().flatten().tolist() == [0, 31, 32, 64]
    assert logits[1].isfinite().all()


def test_greedy_tokenize_prefers_longest_tokens() -> None:
    info = kit_tokenizer_info()
    tokens = greedy_tokenize(info, '{"abc": true}')
    assert [info.vocab[t] for t in tokens] == [b'{"', b"abc", b'": ', b"true", b"}"]


def test_backend_keeps_options_context_and_tokenizer_info() -> None:
    context = GrammarContext(tokenizer_info=kit_tokenizer_info())
    backend = ChoiceGrammar({}, context)
    assert backend.context is context and backend.tokenizer_info is context.tokenizer_info and backend.options == {}


def test_whitespace_mode_is_checked():
    assert ConstraintSpec(json_object=True).whitespace == "bounded"
    with pytest.raises(SpecError, match="whitespace must be one of bounded, any, compact, got 'free'"):
        ConstraintSpec(json_object=True, whitespace="free")


def test_unenforced_names_keywords_and_the_formats_left_out():
    from pyagent_core import GrammarSpec

    spec = GrammarSpec(name="g", impl="a:B", constraint_kinds=("json_schema",), ignored_keywords=("not", "format"),
                       refused_keywords=("oneOf",), enforced_formats=("email",))
    assert spec.unenforced({"type", "not", "oneOf", "format"}, {"email", "iri"}) == ("format:iri", "not", "oneOf")
    assert spec.unenforced({"type", "format"}, {"email"}) == ()


def test_the_schema_walk_visits_subschemas_not_values():
    from pyagent_core.interfaces.json_schema import keywords, subschemas

    schema = {"type": "object", "enum": [{"minimum": 1}], "default": {"maxItems": 2},
              "properties": {"a": {"items": [{"minLength": 1}], "not": {"pattern": "x"}}},
              "dependencies": {"a": ["b"], "c": {"format": "email"}}, "$defs": {"d": True},
              "if": {"const": 1}, "anyOf": [{"multipleOf": 2}]}
    assert keywords(schema) == {"type", "enum", "default", "properties", "items", "not", "minLength", "pattern",
                                "dependencies", "format", "$defs", "if", "const", "anyOf", "multipleOf"}
    deep: dict = {}
    for _ in range(5000):  # no recursion: depth costs no stack
        deep = {"items": deep}
    assert sum(1 for _ in subschemas(deep)) == 5001
