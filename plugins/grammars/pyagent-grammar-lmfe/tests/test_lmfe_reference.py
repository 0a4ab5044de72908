"""Outputs of the lmfe backend checked against independent references (re, membership, lark)."""

from __future__ import annotations

from pyagent_core.testing.grammar_reference import REGEX_AND_CHOICE_CASES, GrammarReferenceConformance
from pyagent_grammar_lmfe.backend import LmfeBackend
from pyagent_grammar_lmfe.plugin import SPEC


class TestLmfeBackendReference(GrammarReferenceConformance):
    impl = LmfeBackend
    spec = SPEC
    cases = REGEX_AND_CHOICE_CASES
