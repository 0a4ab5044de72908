"""Registers the guidance grammar backend. Imported on every listing: no llguidance, no torch here."""

from __future__ import annotations

from collections.abc import Callable

from pyagent_core import GrammarSpec, OptionSpec, hookimpl
from pyagent_core.install import checkout_install_hint

SPEC = GrammarSpec(
    name="guidance",
    impl="pyagent_grammar_guidance.backend:GuidanceBackend",
    summary="llguidance: Earley parser over a lazy lexer, masks on the fly; JSON schema, regex, choice, Lark/GBNF.",
    description=(
        "Grammars in 'lark' are llguidance's Lark dialect; 'gbnf' and 'ebnf' (the '::=' form) are converted "
        "with llguidance's GBNF-to-Lark translator. Rollback, and jump-forward from llguidance's forced bytes. "
        "JSON whitespace: bounded as llama.cpp's (default), any, compact (',' and ':', llguidance's default "
        "separators) or a whitespace pattern. Bounded numbers: 16 integer and 10 fraction digits. "
        "Schemas with unsupported keywords (and oneOf, unless coerce_one_of) are refused, so a fallback can take them."
    ),
    priority=20,
    options={
        "coerce_one_of": OptionSpec(type=bool, default=False,
                                    help="compile oneOf as anyOf (may accept instances matching several branches)"),
    },
    requires=("llguidance==1.9.1", "torch"),
    install_hint=checkout_install_hint("pyagent-grammar-guidance", "plugins/grammars/pyagent-grammar-guidance"),
    constraint_kinds=("json_schema", "json_object", "regex", "choice", "grammar"),
    grammar_dialects=("lark", "gbnf", "ebnf"),
    jump_forward=True,
    rollback=True,
    refused_keywords=("contains", "minContains", "maxContains", "dependencies", "dependentRequired", "dependentSchemas",
                      "if", "then", "else", "not", "oneOf", "propertyNames", "unevaluatedProperties", "uniqueItems",
                      "format"),
    enforced_formats=("email", "date", "time", "date-time", "duration", "uri", "ipv4", "ipv6", "uuid", "hostname"),
)


@hookimpl
def pyagent_register_grammar_backends(register: Callable[[GrammarSpec], None]) -> None:
    """Register the guidance backend."""
    register(SPEC)
