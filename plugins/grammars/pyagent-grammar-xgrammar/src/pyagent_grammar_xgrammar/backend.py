"""xgrammar behind pyagent's grammar interface.

The vocabulary is handed to xgrammar as raw bytes (``VocabType.RAW``); end-of-sequence and special
tokens are given as empty strings, so xgrammar never matches them as text: the end-of-sequence ids
are its stop tokens, the rest (and the padding ids past the vocabulary) are never allowed.

JSON schemas are converted to xgrammar's EBNF and, for bounded whitespace and numbers (the
defaults), rewritten before compiling: every ``[ \n\r\t]*`` between tokens becomes llama.cpp's
``space`` rule (nothing, one space, or a newline and at most 20 spaces or tabs), and the integer,
fraction and exponent parts of xgrammar's number rules take at most 16 digits. A number schema
bounded on one side only gets the other bound (+-(10**16 - 1)), so xgrammar's range rules, which
spell out the digits of both bounds, cover it (their fractions take at most 6 digits).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import xgrammar as xgr

from pyagent_core.interfaces.grammar import (
    MAX_INDENT,
    MAX_NUMBER_DIGITS,
    CompiledGrammar,
    ConstraintSpec,
    GrammarBackend,
    GrammarContext,
    GrammarMatcher,
    TokenizerInfo,
)
from pyagent_core.interfaces.json_schema import has_lower_bound, has_upper_bound, number_types, subschemas

if TYPE_CHECKING:
    import torch

DIALECTS = ("ebnf", "gbnf", "lark")
COMPACT_SEPARATORS = (",", ":")

_ANY_WHITESPACE = "[ \\n\\r\\t]*"
"""How xgrammar 0.2.8 writes the whitespace between JSON tokens in its EBNF."""
_BOUNDED_WHITESPACE = "pyagent_json_space"
_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*"|\[(?:[^\]\\]|\\.)*\]\*?')
"""A string literal or a character class (with its ``*``) of xgrammar's EBNF, read whole so that
nothing inside a literal is taken for a class."""
_FREE = MAX_NUMBER_DIGITS - 1
_NUMBER_RULES = {
    # xgrammar 0.2.8's number rules -> the same with at most MAX_NUMBER_DIGITS digits per part
    'basic_integer ::= (("0") | (basic_integer_1 [1-9] [0-9]*))':
        f'basic_integer ::= (("0") | (basic_integer_1 [1-9] [0-9]{{0,{_FREE}}}))',
    'basic_number_2 ::= (("0") | ([1-9] [0-9]*))': f'basic_number_2 ::= (("0") | ([1-9] [0-9]{{0,{_FREE}}}))',
    'basic_number_3 ::= ("" | ("." basic_number_digits{1, -1}))':
        f'basic_number_3 ::= ("" | ("." basic_number_digits{{1,{MAX_NUMBER_DIGITS}}}))',
    'basic_number_5 ::= ("" | ([eE] basic_number_4 basic_number_digits{1, -1}))':
        f'basic_number_5 ::= ("" | ([eE] basic_number_4 basic_number_digits{{1,{MAX_NUMBER_DIGITS}}}))',
}
_NUMBER_LIMIT = 10**MAX_NUMBER_DIGITS - 1


class XGrammarMatcher(GrammarMatcher):
    """One request's walk through an xgrammar grammar; unlimited rollback."""

    def __init__(self, compiled: xgr.CompiledGrammar, info: TokenizerInfo, never: frozenset[int]) -> None:
        self._matcher = xgr.GrammarMatcher(compiled)
        self._vocab_len = len(info.vocab)
        self._never = never
        self._accepted = 0

    def accept_token(self, token_id: int) -> bool:
        """Advance by ``token_id`` if the grammar allows it (checked before xgrammar sees the id)."""
        if not 0 <= token_id < self._vocab_len or token_id in self._never or self._matcher.is_terminated():
            return False
        accepted = bool(self._matcher.accept_token(token_id))
        self._accepted += accepted
        return accepted

    def fill_bitmask(self, bitmask: torch.Tensor, row: int) -> None:
        """Write the allowed tokens into ``bitmask[row]``; none once terminated."""
        if self._matcher.is_terminated():
            bitmask[row] = 0
        else:
            self._matcher.fill_next_token_bitmask(bitmask, row)

    def rollback(self, num_tokens: int) -> None:
        """Undo the last ``num_tokens`` accepted tokens (the end-of-sequence token included)."""
        if not 0 <= num_tokens <= self._accepted:
            raise ValueError(f"cannot roll back {num_tokens} tokens: {self._accepted} were accepted")
        if num_tokens:
            self._matcher.rollback(num_tokens)
            self._accepted -= num_tokens

    def is_terminated(self) -> bool:
        """True once an end-of-sequence token was accepted."""
        return bool(self._matcher.is_terminated())

    def reset(self) -> None:
        """Back to the start of the grammar."""
        self._matcher.reset()
        self._accepted = 0

    def jump_forward(self) -> str:
        """The text xgrammar finds forced from here (``find_jump_forward_string``)."""
        return "" if self._matcher.is_terminated() else str(self._matcher.find_jump_forward_string())


class XGrammarCompiled(CompiledGrammar):
    """An xgrammar ``CompiledGrammar`` with the tokenizer facts its matchers need."""

    def __init__(self, compiled: xgr.CompiledGrammar, info: TokenizerInfo, never: frozenset[int]) -> None:
        self.compiled = compiled
        self._info = info
        self._never = never

    def matcher(self) -> XGrammarMatcher:
        """A fresh matcher at the start of the grammar."""
        return XGrammarMatcher(self.compiled, self._info, self._never)

    def memory_bytes(self) -> int:
        """xgrammar's count of the compiled grammar's bytes (``memory_size_bytes``: its adaptive token masks)."""
        return int(self.compiled.memory_size_bytes)


def _choice_grammar(choices: tuple[str, ...]) -> str:
    """An EBNF grammar whose root is one of ``choices`` (JSON escapes are valid EBNF string escapes)."""
    return "root ::= " + " | ".join(json.dumps(choice) for choice in choices)


class XGrammarBackend(GrammarBackend):
    """Compiles constraints with one ``xgrammar.GrammarCompiler`` per tokenizer.

    xgrammar's own compile cache is off: pyagent's engine keeps the cache of compiled grammars.
    """

    def __init__(self, options: Mapping[str, Any], context: GrammarContext) -> None:
        super().__init__(options, context)
        tokenizer_info = context.tokenizer_info
        hidden = {*tokenizer_info.eos_token_ids, *tokenizer_info.special_token_ids}
        vocab = [b"" if i in hidden else token for i, token in enumerate(tokenizer_info.vocab)]
        self._never = frozenset(tokenizer_info.special_token_ids)
        self._xgr_info = xgr.TokenizerInfo(
            vocab, xgr.VocabType.RAW, vocab_size=tokenizer_info.vocab_size,
            stop_token_ids=list(tokenizer_info.eos_token_ids),
        )
        self._compiler = xgr.GrammarCompiler(
            self._xgr_info, max_threads=int(self.options["max_threads"]), cache_enabled=False,
        )

    def supports(self, constraint: ConstraintSpec) -> str | None:
        """Every kind; grammars in ``ebnf``, ``gbnf`` or ``lark``; no whitespace pattern, no compact
        ``json_object``."""
        if constraint.kind == "grammar" and constraint.grammar_dialect not in DIALECTS:
            return (f"xgrammar reads grammars in {', '.join(DIALECTS)}, "
                    f"not grammar_dialect={constraint.grammar_dialect!r}")
        if constraint.whitespace_pattern is not None and constraint.kind in ("json_schema", "json_object"):
            return (f"xgrammar has no whitespace pattern (got {constraint.whitespace_pattern!r}); "
                    "it allows any whitespace or the compact form only")
        if constraint.kind == "json_object" and constraint.whitespace == "compact":
            return ("xgrammar 0.2.8 writes ', ' between the items of free-form JSON values even in compact "
                    "mode, so it cannot hold a JSON object to the compact form")
        return None

    def compile(self, constraint: ConstraintSpec) -> XGrammarCompiled:
        """Compile ``constraint``; ``ValueError`` with xgrammar's message when it is malformed."""
        self.check_supported(constraint)
        try:
            compiled = self._compile(constraint)
        except (RuntimeError, ValueError, TypeError) as error:
            message = str(error).strip().splitlines()[-1] if str(error).strip() else type(error).__name__
            raise ValueError(f"xgrammar cannot compile this {constraint.kind} constraint: {message}") from None
        return XGrammarCompiled(compiled, self.tokenizer_info, self._never)

    def _json_schema(self, schema: str, constraint: ConstraintSpec) -> xgr.CompiledGrammar:
        compact = constraint.whitespace == "compact"
        options = {"any_whitespace": not compact, "separators": COMPACT_SEPARATORS if compact else None,
                   "strict_mode": not constraint.additional_properties, "any_order": bool(self.options["any_order"])}
        if constraint.whitespace == "any" and not constraint.bounded_numbers:
            return self._compiler.compile_json_schema(schema, **options)
        if constraint.bounded_numbers:
            schema = json.dumps(close_number_ranges(json.loads(schema)))
        ebnf = str(xgr.Grammar.from_json_schema(schema, **options))
        return self._compiler.compile_grammar(xgr.Grammar.from_ebnf(bounded_ebnf(
            ebnf, whitespace=constraint.whitespace == "bounded", numbers=constraint.bounded_numbers)))

    def _compile(self, constraint: ConstraintSpec) -> xgr.CompiledGrammar:
        kind = constraint.kind
        if kind == "json_schema":
            return self._json_schema(str(constraint.json_schema), constraint)
        if kind == "json_object":
            return self._json_schema('{"type": "object"}', constraint)
        if kind == "regex":
            return self._compiler.compile_regex(str(constraint.regex))
        if kind == "choice":
            return self._compiler.compile_grammar(_choice_grammar(tuple(constraint.choice or ())))
        if kind == "grammar":
            text = str(constraint.grammar)
            lark = constraint.grammar_dialect == "lark"
            return self._compiler.compile_grammar(xgr.Grammar.from_lark(text) if lark else xgr.Grammar.from_ebnf(text))
        return self._compiler.compile_structural_tag(_structural_tag(str(constraint.structural_tag)))


def close_number_ranges(schema: Any) -> Any:
    """``schema`` with the missing bound (+-(10**16 - 1)) added to number schemas bounded on one side only."""
    for subschema in subschemas(schema):
        if number_types(subschema) and has_lower_bound(subschema) != has_upper_bound(subschema):
            if has_lower_bound(subschema):
                subschema["maximum"] = _NUMBER_LIMIT
            else:
                subschema["minimum"] = -_NUMBER_LIMIT
    return schema


def bounded_ebnf(ebnf: str, whitespace: bool, numbers: bool) -> str:
    """xgrammar's EBNF of a JSON schema with llama.cpp's bounded whitespace and/or bounded number rules.

    Raises ``RuntimeError`` when the EBNF does not have the shape of xgrammar 0.2.8's (another version).
    """
    if whitespace:
        replaced = 0

        def bound(token: re.Match[str]) -> str:
            nonlocal replaced
            if token.group() != _ANY_WHITESPACE:
                return token.group()
            replaced += 1
            return _BOUNDED_WHITESPACE

        ebnf = _TOKEN.sub(bound, ebnf)
        if not replaced or re.search(rf"^{_BOUNDED_WHITESPACE} ::=", ebnf, re.MULTILINE):
            raise RuntimeError("xgrammar's JSON grammar does not write whitespace as expected; "
                               "install the xgrammar version this plugin requires")
        ebnf += f'\n{_BOUNDED_WHITESPACE} ::= ("" | " " | "\\n" [ \\t]{{0,{MAX_INDENT}}})\n'
    if numbers:
        lines = ebnf.splitlines()
        if not set(_NUMBER_RULES) <= set(lines):
            raise RuntimeError("xgrammar's JSON grammar does not write numbers as expected; "
                               "install the xgrammar version this plugin requires")
        ebnf = "\n".join(_NUMBER_RULES.get(line, line) for line in lines) + "\n"
    return ebnf


def _structural_tag(text: str) -> dict[str, Any]:
    """pyagent's structural tag (``structures`` of begin/schema/end; ``triggers`` for calls in free text, or a
    ``separator`` for calls only; optional ``at_least_one`` and ``stop_after_first``) in xgrammar's format:
    ``triggered_tags``, or ``tags_with_separator``."""
    try:
        value = json.loads(text)
        structures = value["structures"]
        tags = [{"begin": s["begin"], "content": {"type": "json_schema", "json_schema": s["schema"]}, "end": s["end"]}
                for s in structures]
        flags = {flag: value.get(flag, False) for flag in ("at_least_one", "stop_after_first")}
        if not all(isinstance(v, bool) for v in flags.values()):
            raise TypeError(f"at_least_one and stop_after_first must be true or false, got {flags}")
        if "separator" in value:
            if not isinstance(value["separator"], str):
                raise TypeError(f"separator must be a string, got {value['separator']!r}")
            layout = {"type": "tags_with_separator", "separator": value["separator"]}
        else:
            layout = {"type": "triggered_tags", "triggers": value["triggers"]}
    except (ValueError, KeyError, TypeError) as error:
        raise ValueError(
            f"a structural tag is {{'structures': [{{'begin', 'schema', 'end'}}...], 'triggers': [...]}} or "
            f"{{'structures': [...], 'separator': '...'}}; this one is not ({type(error).__name__}: {error})"
        ) from None
    return {"type": "structural_tag", "format": {**layout, "tags": tags, **flags}}
