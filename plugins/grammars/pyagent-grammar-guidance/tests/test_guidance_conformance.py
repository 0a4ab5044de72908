"""The grammar conformance kit run against the guidance (llguidance) backend, with grammar and
whitespace cases added; and the JSONSchemaBench sample."""

from __future__ import annotations

import pytest

from pyagent_core.interfaces.grammar import ConstraintSpec
from pyagent_core.testing.grammar import (
    BOUNDED_JSON_CASES,
    DEFAULT_CASES,
    GrammarCase,
    GrammarConformance,
    greedy_tokenize,
)
from pyagent_core.testing.grammar_reference import ARITHMETIC_ACCEPTED, ARITHMETIC_GBNF, ARITHMETIC_LARK
from pyagent_engine.testing.grammar_corpus import SchemaCorpusConformance
from pyagent_grammar_guidance.backend import GuidanceBackend
from pyagent_grammar_guidance.plugin import SPEC

ARITHMETIC_REJECTED = ("", "1+", "(1", "1 +2", "a")


class TestGuidance(GrammarConformance):
    impl = GuidanceBackend
    spec = SPEC
    bounded_json = True
    cases = (
        *DEFAULT_CASES,
        *BOUNDED_JSON_CASES,
        GrammarCase(ConstraintSpec(grammar=ARITHMETIC_LARK, grammar_dialect="lark"), ARITHMETIC_ACCEPTED,
                    ARITHMETIC_REJECTED),
        GrammarCase(ConstraintSpec(grammar=ARITHMETIC_GBNF, grammar_dialect="gbnf"), ARITHMETIC_ACCEPTED,
                    ARITHMETIC_REJECTED),
        GrammarCase(ConstraintSpec(json_object=True, whitespace="compact"),
                    accepted=['{"a":1}', '{"ab":[true,null]}'], rejected=['{"a": 1}', '{ "a":1}', '{"a":1, "b":2}']),
        GrammarCase(ConstraintSpec(json_object=True, whitespace_pattern="[ ]?"),
                    accepted=['{"a": 1}', '{"a":1, "b": [true]}'], rejected=['{"a":  1}', '{"a":\n1}']),
        GrammarCase(ConstraintSpec(json_schema={"type": "object", "properties": {"a": {"type": "integer"}}}),
                    accepted=['{"a": 1, "b": 2}', '{"b": "x"}'], rejected=['{"a": "x"}']),
    )


class TestGuidanceSchemaBench(SchemaCorpusConformance):
    """Every 10th schema (37): 10 use keywords llguidance refuses (oneOf, not, if/then/else, formats...)."""

    backend = "guidance"
    stride = 10
    min_compiled = 27
    min_valid_accepted = 76
    min_invalid_rejected = 55


def test_closing_objects_is_refused_with_a_reason() -> None:
    backend = TestGuidance().make_backend()
    reason = backend.supports(ConstraintSpec(json_object=True, additional_properties=False))
    assert reason is not None and "additionalProperties" in reason


def test_one_of_is_refused_unless_coerced() -> None:
    overlapping = [{"type": "string", "maxLength": 3}, {"type": "string", "pattern": "a"}]
    one_of = ConstraintSpec(json_schema={"oneOf": overlapping})
    with pytest.raises(ValueError, match="oneOf"):
        TestGuidance().make_backend().compile(one_of)
    backend = TestGuidance().make_backend(coerce_one_of=True)
    matcher = backend.compile(one_of).matcher()
    info = TestGuidance().tokenizer_info()
    # "ab" matches both branches: oneOf rejects it, the anyOf approximation lets it through.
    assert all(matcher.accept_token(t) for t in [*greedy_tokenize(info, '"ab"'), 0]) and matcher.is_terminated()
