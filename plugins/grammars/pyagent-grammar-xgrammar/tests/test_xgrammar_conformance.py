"""The grammar conformance kit run against the xgrammar backend, with grammar, structural-tag and
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
from pyagent_grammar_xgrammar.backend import XGrammarBackend, bounded_ebnf
from pyagent_grammar_xgrammar.plugin import SPEC

ARITHMETIC_REJECTED = ("", "1+", "(1", "1 +2", "a")
TOOL_TAG = {"structures": [{"begin": "<f>", "schema": {"type": "object", "properties": {"a": {"type": "integer"}},
                                                        "required": ["a"]}, "end": "</f>"}],
            "triggers": ["<f>"]}

INTEGERS = {"type": "object", "properties": {"a": {"type": "array", "items": {"type": "integer"}}},
            "required": ["a"], "additionalProperties": False}


class TestXGrammar(GrammarConformance):
    impl = XGrammarBackend
    spec = SPEC
    bounded_json = True
    cases = (
        *DEFAULT_CASES,
        *BOUNDED_JSON_CASES,
        GrammarCase(ConstraintSpec(grammar=ARITHMETIC_GBNF), ARITHMETIC_ACCEPTED, ARITHMETIC_REJECTED),
        GrammarCase(ConstraintSpec(grammar=ARITHMETIC_GBNF, grammar_dialect="gbnf"), ARITHMETIC_ACCEPTED,
                    ARITHMETIC_REJECTED),
        GrammarCase(ConstraintSpec(grammar=ARITHMETIC_LARK, grammar_dialect="lark"), ARITHMETIC_ACCEPTED,
                    ARITHMETIC_REJECTED),
        GrammarCase(ConstraintSpec(structural_tag=TOOL_TAG),
                    accepted=["so", 'ab <f>{"a": 12}</f> yes', '<f>{"a":1}</f>'],
                    rejected=['<f>{"b": 1}</f>', '<f>{"a": 1}', '<f>[1]</f>']),
        GrammarCase(ConstraintSpec(structural_tag={**TOOL_TAG, "at_least_one": True}),
                    accepted=['<f>{"a":1}</f>', '<f>{"a":1}</f> then <f>{"a":2}</f>'],
                    rejected=["so", "", 'ab <f>{"a": 12}</f>']),
        GrammarCase(ConstraintSpec(structural_tag={**TOOL_TAG, "at_least_one": True, "stop_after_first": True}),
                    accepted=['<f>{"a":1}</f>'], rejected=['<f>{"a":1}</f> then', '<f>{"a":1}</f><f>{"a":2}</f>']),
        GrammarCase(ConstraintSpec(json_schema=INTEGERS, whitespace="compact"),
                    accepted=['{"a":[1,2]}', '{"a":[]}'], rejected=['{"a": [1,2]}', '{"a":[1, 2]}', '{ "a":[]}']),
        GrammarCase(ConstraintSpec(json_schema={"type": "object", "properties": {"a": {"type": "integer"}}},
                                   additional_properties=False),
                    accepted=['{"a": 1}', "{}"], rejected=['{"a": 1, "b": 2}', '{"b": 2}']),
        GrammarCase(ConstraintSpec(json_schema={"type": "object", "properties": {"a": {"type": "integer"}}}),
                    accepted=['{"a": 1, "b": 2}', '{"b": "x"}'], rejected=['{"a": "x"}']),
    )


class TestXGrammarSchemaBench(SchemaCorpusConformance):
    """Every 10th schema up to 1500 characters (26; compile time grows with schema size). Finding: 4 valid
    walks are refused, Github_easy---o10013's (an object-level oneOf) among them."""

    backend = "xgrammar"
    stride = 10
    max_schema_chars = 1500
    min_compiled = 26
    min_valid_accepted = 40
    min_invalid_rejected = 30


def test_whitespace_options_it_cannot_hold_are_refused_with_a_reason() -> None:
    backend = TestXGrammar().make_backend()
    reason = backend.supports(ConstraintSpec(json_object=True, whitespace_pattern=" ?"))
    assert reason is not None and "whitespace pattern" in reason
    # Finding (xgrammar 0.2.8): compact mode still puts ', ' between the items of free-form values.
    reason = backend.supports(ConstraintSpec(json_object=True, whitespace="compact"))
    assert reason is not None and "compact" in reason


def test_any_order_lets_properties_come_in_another_order() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
              "required": ["a", "b"]}
    info = TestXGrammar().tokenizer_info()
    swapped = [*greedy_tokenize(info, '{"b": 1, "a": 2}'), 0]
    ordered = TestXGrammar().make_backend(any_order=False).compile(ConstraintSpec(json_schema=schema))
    assert not all(ordered.matcher().accept_token(t) for t in swapped)
    free = TestXGrammar().make_backend(any_order=True).compile(ConstraintSpec(json_schema=schema))
    matcher = free.matcher()
    assert all(matcher.accept_token(t) for t in swapped) and matcher.is_terminated()


def test_finding_pattern_properties_must_match_the_whole_key() -> None:
    """xgrammar 0.2.8 matches a patternProperties pattern against the whole key: ``^x`` refuses ``xa``,
    which JSON Schema (a search) allows; ``jsonschema`` is the reference."""
    import jsonschema

    schema = {"type": "object", "patternProperties": {"^x": {"type": "integer"}}}
    jsonschema.validate({"xa": 1}, schema)
    info = TestXGrammar().tokenizer_info()
    matcher = TestXGrammar().make_backend().compile(ConstraintSpec(json_schema=schema)).matcher()
    assert not all(matcher.accept_token(token) for token in greedy_tokenize(info, '{"xa": 1}'))


def test_bounded_rewrite_refuses_an_ebnf_of_another_shape() -> None:
    """The rewrite guards against another xgrammar version writing whitespace or numbers differently."""
    with pytest.raises(RuntimeError, match="does not write whitespace as expected"):
        bounded_ebnf('root ::= "{" [ \\t]* "}"', whitespace=True, numbers=False)
    with pytest.raises(RuntimeError, match="does not write numbers as expected"):
        bounded_ebnf('root ::= (("0") | ([1-9] [0-9]*))', whitespace=False, numbers=True)
    literal = 'root ::= "[ \\n\\r\\t]*" [ \\n\\r\\t]* "x"'  # whitespace inside a string literal stays
    assert bounded_ebnf(literal, whitespace=True, numbers=False).startswith(
        'root ::= "[ \\n\\r\\t]*" pyagent_json_space "x"')
