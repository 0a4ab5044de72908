"""xgrammar behind pyagent's grammar interface.

The vocabulary is handed to xgrammar as raw bytes (``VocabType.RAW``); end-of-sequence and special
tokens are given as empty strings, so xgrammar never matches them as text: the end-of-sequence ids
are its stop tokens, the rest (and the padding ids past the vocabulary) are never allowed.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import xgrammar as xgr

from pyagent_core.interfaces.grammar import (
    CompiledGrammar,
    ConstraintSpec,
    GrammarBackend,
    GrammarContext,
    GrammarMatcher,
    TokenizerInfo,
)

if TYPE_CHECKING:
    import torch

DIALECTS = ("ebnf", "gbnf", "lark")
COMPACT_SEPARATORS = (",", ":")


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
        if constraint.kind == "json_object" and not constraint.any_whitespace:
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
        return self._compiler.compile_json_schema(
            schema, any_whitespace=constraint.any_whitespace,
            separators=None if constraint.any_whitespace else COMPACT_SEPARATORS,
            strict_mode=not constraint.additional_properties, any_order=bool(self.options["any_order"]),
        )

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


def _structural_tag(text: str) -> dict[str, Any]:
    """pyagent's structural tag (``structures`` of begin/schema/end, ``triggers``) in xgrammar's format."""
    try:
        value = json.loads(text)
        structures, triggers = value["structures"], value["triggers"]
        tags = [{"begin": s["begin"], "content": {"type": "json_schema", "json_schema": s["schema"]}, "end": s["end"]}
                for s in structures]
    except (ValueError, KeyError, TypeError) as error:
        raise ValueError(
            f"a structural tag is {{'structures': [{{'begin', 'schema', 'end'}}...], 'triggers': [...]}}; "
            f"this one is not ({type(error).__name__}: {error})"
        ) from None
    return {"type": "structural_tag", "format": {"type": "triggered_tags", "triggers": triggers, "tags": tags}}
