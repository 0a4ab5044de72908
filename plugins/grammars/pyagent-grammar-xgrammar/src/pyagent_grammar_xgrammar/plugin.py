"""Registers the xgrammar grammar backend. Imported on every listing: no xgrammar, no torch here."""

from __future__ import annotations

from collections.abc import Callable

from pyagent_core import GrammarSpec, OptionSpec, hookimpl
from pyagent_core.install import checkout_install_hint

SPEC = GrammarSpec(
    name="xgrammar",
    impl="pyagent_grammar_xgrammar.backend:XGrammarBackend",
    summary="xgrammar: pushdown automata with precomputed token masks; JSON schema, regex, choice, EBNF/GBNF/Lark.",
    description=(
        "Compiles every constraint kind, structural tags included, and offers rollback and jump-forward "
        "(find_jump_forward_string). Grammars in dialects 'ebnf' and 'gbnf' use xgrammar's GBNF-style EBNF; "
        "'lark' grammars are converted by xgrammar. JSON whitespace: bounded as llama.cpp's (default), any, or "
        "compact (',' and ':'); a custom whitespace pattern is not supported. Bounded numbers: 16-digit parts."
    ),
    priority=30,
    options={
        "max_threads": OptionSpec(type=int, default=1, min=1, max=64,
                                  help="threads xgrammar uses to build one grammar's token-mask cache"),
        "any_order": OptionSpec(type=bool, default=False,
                                help="let JSON object properties come in any order (default: the schema's order)"),
    },
    requires=("xgrammar==0.2.8", "torch"),
    install_hint=(checkout_install_hint("pyagent-grammar-xgrammar", "plugins/grammars/pyagent-grammar-xgrammar")
                  + "; xgrammar's wheel also declares triton (about 1 GB, never imported on CPU), which "
                  "`make install` leaves out by installing xgrammar with --no-deps"),
    constraint_kinds=("json_schema", "json_object", "regex", "choice", "grammar", "structural_tag"),
    grammar_dialects=("ebnf", "gbnf", "lark"),
    jump_forward=True,
    rollback=True,
    ignored_keywords=("allOf", "contains", "minContains", "maxContains", "dependencies", "dependentRequired",
                      "dependentSchemas", "if", "then", "else", "not", "oneOf", "unevaluatedProperties", "uniqueItems",
                      "format"),
    enforced_formats=("email", "date", "time", "date-time", "duration", "uri", "uri-reference", "ipv4", "ipv6", "uuid",
                      "hostname", "json-pointer", "relative-json-pointer", "uri-template"),
)


@hookimpl
def pyagent_register_grammar_backends(register: Callable[[GrammarSpec], None]) -> None:
    """Register the xgrammar backend."""
    register(SPEC)
