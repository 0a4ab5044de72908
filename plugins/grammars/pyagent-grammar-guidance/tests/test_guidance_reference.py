"""Outputs of the guidance backend checked against independent references (re, membership, lark)."""

from __future__ import annotations

from pyagent_core.testing.grammar_reference import REGEX_AND_CHOICE_CASES, GrammarReferenceConformance, arithmetic_case
from pyagent_grammar_guidance.backend import GuidanceBackend
from pyagent_grammar_guidance.plugin import SPEC


class TestGuidanceBackendReference(GrammarReferenceConformance):
    impl = GuidanceBackend
    spec = SPEC
    cases = (*REGEX_AND_CHOICE_CASES, *(arithmetic_case(d) for d in ("lark", "gbnf", "ebnf")))
