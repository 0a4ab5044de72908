"""Registers the lmfe grammar backend. Imported on every listing: no lm-format-enforcer, no torch here."""

from __future__ import annotations

from collections.abc import Callable

from pyagent_core import GrammarSpec, OptionSpec, hookimpl
from pyagent_core.install import checkout_install_hint

UNENFORCED_KEYWORDS = (
    "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf", "format", "uniqueItems",
    "minProperties", "maxProperties", "patternProperties", "propertyNames", "dependencies", "dependentRequired",
    "dependentSchemas", "if", "then", "else", "not", "oneOf", "contains", "minContains", "maxContains", "prefixItems",
    "additionalItems", "unevaluatedProperties", "unevaluatedItems", "$dynamicRef", "$recursiveRef",
)
"""JSON Schema validation keywords lm-format-enforcer (0.11.3) ignores (``oneOf`` it gets wrong: at the top
level it masks every number of ``oneOf: [integer, number]``); other unknown keywords are annotations,
which JSON Schema itself ignores. Strict mode refuses schemas that use them."""

SPEC = GrammarSpec(
    name="lmfe",
    impl="pyagent_grammar_lmfe.backend:LmfeBackend",
    summary="lm-format-enforcer: character-level parsers walked over a token prefix tree; JSON schema, regex, choice.",
    description=(
        "Pure Python. Schemas using keywords lm-format-enforcer does not enforce (minimum, format, "
        "uniqueItems...) are refused unless strict=false, so that a fallback backend serves them. JSON "
        "whitespace is always free (up to max_consecutive_whitespaces), for 'bounded' too, and numbers are "
        "unbounded; compact output and whitespace patterns are refused. Tokens that are not whole UTF-8 "
        "characters are never allowed. Rollback; no "
        "jump-forward."
    ),
    priority=10,
    options={
        "strict": OptionSpec(type=bool, default=True,
                             help="refuse schemas with keywords lm-format-enforcer does not enforce"),
        "max_consecutive_whitespaces": OptionSpec(type=int, default=12, min=1,
                                                  help="most whitespace characters in a row in JSON output"),
        "max_array_length": OptionSpec(type=int, default=20, min=1,
                                       help="most items of a JSON array whose schema sets no maxItems"),
    },
    requires=("lm-format-enforcer==0.11.3", "torch"),
    install_hint=checkout_install_hint("pyagent-grammar-lmfe", "plugins/grammars/pyagent-grammar-lmfe"),
    constraint_kinds=("json_schema", "json_object", "regex", "choice"),
    rollback=True,
    refused_keywords=UNENFORCED_KEYWORDS,
)


@hookimpl
def pyagent_register_grammar_backends(register: Callable[[GrammarSpec], None]) -> None:
    """Register the lmfe backend."""
    register(SPEC)
