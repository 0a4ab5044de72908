"""Outputs of the xgrammar backend checked against independent references (re, membership, lark)."""

from __future__ import annotations

from pyagent_core.testing.grammar_reference import REGEX_AND_CHOICE_CASES, GrammarReferenceConformance, arithmetic_case
from pyagent_grammar_xgrammar.backend import XGrammarBackend
from pyagent_grammar_xgrammar.plugin import SPEC


class TestXGrammarBackendReference(GrammarReferenceConformance):
    impl = XGrammarBackend
    spec = SPEC
    cases = (*REGEX_AND_CHOICE_CASES, *(arithmetic_case(d) for d in ("ebnf", "gbnf", "lark")))
