"""llguidance behind pyagent's grammar interface.

llguidance's ``LLMatcher`` enters a permanent error state when it consumes a token its grammar
forbids (``reset`` does not clear it), so a token is consumed only when its bit is set in the mask of
the current state. That mask is stricter than ``LLMatcher.validate_tokens``: where the next bytes are
forced, llguidance allows only the tokens of their canonical tokenisation. The mask of the current
state is kept, so the usual ``fill_bitmask`` then ``accept_token`` costs one mask computation. The
end-of-sequence token is kept out of llguidance: it only sets this wrapper's ``terminated`` flag,
which makes its rollback exact.

JSON whitespace is bounded (the default) with llguidance's whitespace pattern set to llama.cpp's
``space`` rule; numbers are bounded (the default) by adding ``minimum``, ``maximum`` and, for
``number``, ``multipleOf`` to the schemas that set none (see :func:`bound_numbers`); a
``json_object`` constraint is spelled out as a schema for that. Values a schema leaves untyped
(``{}``, unset ``additionalProperties``) keep llguidance's unbounded numbers.
"""

from __future__ import annotations

import codecs
import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import llguidance as llg
from llguidance.gbnf_to_lark import gbnf_to_lark

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
    from llguidance._lib import JsonCompileOptions

DIALECTS = ("lark", "gbnf", "ebnf")
_WORD_BYTES = 4


class _Vocab:
    """What ``llguidance.TokenizerWrapper`` reads: token bytes, special ids and an encoder.

    llguidance tokenises forced text with the encoder and then allows only those tokens there, so
    the model's own encoder (``TokenizerInfo.encode``) is used when given; otherwise a longest match
    over the vocabulary's non-special tokens.
    """

    def __init__(self, info: TokenizerInfo) -> None:
        self._encode = info.encode
        self.eos_token_id = info.eos_token_ids[0]
        self.bos_token_id = None
        self.tokens = list(info.vocab)
        self.special_token_ids = sorted({*info.eos_token_ids, *info.special_token_ids})
        special = set(self.special_token_ids)
        self._ids = {token: i for i, token in enumerate(info.vocab) if i not in special and token}
        self._longest = max(map(len, self._ids), default=1)

    def __call__(self, text: bytes | str) -> list[int]:
        if self._encode is not None:
            try:
                return list(self._encode(text.decode("utf-8") if isinstance(text, bytes) else text))
            except UnicodeDecodeError:
                pass  # a piece of a character: only the longest match can spell it
        data = text.encode("utf-8") if isinstance(text, str) else text
        out, pos = [], 0
        while pos < len(data):
            for size in range(min(self._longest, len(data) - pos), 0, -1):
                token = self._ids.get(data[pos:pos + size])
                if token is not None:
                    out.append(token)
                    pos += size
                    break
            else:
                raise ValueError(f"byte {data[pos]:#04x} at {pos} is not a token of this vocabulary")
        return out


def _utf8_prefix(data: bytes) -> str:
    """The longest prefix of ``data`` made of whole UTF-8 characters."""
    return str(codecs.getincrementaldecoder("utf-8")(errors="strict").decode(data, final=False))


class GuidanceMatcher(GrammarMatcher):
    """One request's walk through an llguidance grammar (a deep copy of the compiled matcher)."""

    def __init__(self, pristine: llg.LLMatcher, info: TokenizerInfo) -> None:
        self._matcher = pristine.deep_copy()
        self._vocab_len = len(info.vocab)
        self._eos = frozenset(info.eos_token_ids)
        self._never = frozenset(info.special_token_ids)
        self._mask_words = (len(info.vocab) + 31) // 32
        self._accepted = 0
        self._terminated = False
        self._mask: torch.Tensor | None = None

    def _current_mask(self) -> torch.Tensor:
        """The mask of the current state (``int32 [words]``), computed once per state."""
        if self._mask is None:
            import torch

            mask = torch.zeros(self._mask_words, dtype=torch.int32)
            if not self._terminated:
                self._matcher.unsafe_compute_mask_ptr(mask.data_ptr(), self._mask_words * _WORD_BYTES)
            self._mask = mask
        return self._mask

    def accept_token(self, token_id: int) -> bool:
        """Advance by ``token_id`` when its bit is set in the current mask."""
        if self._terminated or not 0 <= token_id < self._vocab_len or token_id in self._never:
            return False
        if not int(self._current_mask()[token_id // 32]) >> (token_id % 32) & 1:
            return False
        if token_id in self._eos:
            self._terminated = True
        elif not self._matcher.consume_token(token_id):
            raise RuntimeError(f"llguidance refused token {token_id} its own mask allowed: {self._matcher.get_error()}")
        self._accepted += 1
        self._mask = None
        return True

    def fill_bitmask(self, bitmask: torch.Tensor, row: int) -> None:
        """Write llguidance's mask into ``bitmask[row]``; none once terminated."""
        bitmask[row] = 0
        bitmask[row, :self._mask_words] = self._current_mask()

    def rollback(self, num_tokens: int) -> None:
        """Undo the last ``num_tokens`` accepted tokens (an accepted end-of-sequence counts as one)."""
        if not 0 <= num_tokens <= self._accepted:
            raise ValueError(f"cannot roll back {num_tokens} tokens: {self._accepted} were accepted")
        parsed = num_tokens
        if num_tokens and self._terminated:
            self._terminated = False
            parsed -= 1
        if parsed and not self._matcher.rollback(parsed):
            raise RuntimeError(f"llguidance failed to roll back {parsed} tokens: {self._matcher.get_error()}")
        self._accepted -= num_tokens
        self._mask = None

    def is_terminated(self) -> bool:
        """True once an end-of-sequence token was accepted."""
        return self._terminated

    def reset(self) -> None:
        """Back to the start of the grammar."""
        self._matcher.reset()
        self._accepted = 0
        self._terminated = False
        self._mask = None

    def jump_forward(self) -> str:
        """The whole UTF-8 characters of llguidance's forced bytes (``compute_ff_bytes``)."""
        return "" if self._terminated else _utf8_prefix(self._matcher.compute_ff_bytes())


class GuidanceCompiled(CompiledGrammar):
    """A validated llguidance matcher at the start of its grammar; matchers are deep copies of it."""

    def __init__(self, pristine: llg.LLMatcher, info: TokenizerInfo) -> None:
        self._pristine = pristine
        self._info = info

    def matcher(self) -> GuidanceMatcher:
        """A fresh matcher at the start of the grammar."""
        return GuidanceMatcher(self._pristine, self._info)


class GuidanceBackend(GrammarBackend):
    """Compiles constraints to llguidance grammars for one ``LLTokenizer``."""

    def __init__(self, options: Mapping[str, Any], context: GrammarContext) -> None:
        super().__init__(options, context)
        info = context.tokenizer_info
        self._tokenizer = llg.LLTokenizer(llg.TokenizerWrapper(_Vocab(info)), eos_token=list(info.eos_token_ids))

    def supports(self, constraint: ConstraintSpec) -> str | None:
        """JSON, regex, choice and grammars in lark/gbnf/ebnf; no closing of open objects."""
        kind = constraint.kind
        if kind == "structural_tag":
            return "the guidance backend does not compile structural tags; use xgrammar"
        if kind == "grammar" and constraint.grammar_dialect not in DIALECTS:
            return (f"llguidance reads grammars in {', '.join(DIALECTS)}, "
                    f"not grammar_dialect={constraint.grammar_dialect!r}")
        if kind in ("json_schema", "json_object") and not constraint.additional_properties:
            return ("llguidance follows JSON Schema for objects that leave additionalProperties unset; "
                    "it cannot close them (additional_properties=False): set additionalProperties in the schema")
        return None

    def compile(self, constraint: ConstraintSpec) -> GuidanceCompiled:
        """Build and validate the llguidance matcher; ``ValueError`` with llguidance's message."""
        self.check_supported(constraint)
        try:
            grammar = _grammar(constraint, bool(self.options["coerce_one_of"]))
        except ValueError as error:
            raise ValueError(f"llguidance cannot read this {constraint.kind} constraint: {error}") from None
        pristine = llg.LLMatcher(self._tokenizer, grammar, log_level=0)
        if pristine.is_error():
            message = pristine.get_error().strip().splitlines()
            raise ValueError(f"llguidance cannot compile this {constraint.kind} constraint: "
                             f"{' '.join(message[:4])}")
        return GuidanceCompiled(pristine, self.tokenizer_info)


BOUNDED_WHITESPACE = f"(?: |\\n[ \\t]{{0,{MAX_INDENT}}})"
"""llama.cpp's ``space`` rule as an llguidance whitespace pattern (which llguidance makes optional)."""

NUMBER_LIMIT = 10**MAX_NUMBER_DIGITS - 1
FRACTION_STEP = 1e-10
"""The finest ``multipleOf`` llguidance 1.9.1 takes (1e-11 has 'too many digits'): at most 10 fraction digits."""


def bound_numbers(schema: Any) -> Any:
    """``schema`` with bounds llguidance enforces added to its number schemas, where they set none:
    ``minimum``/``maximum`` +-(10**16 - 1) (at most 16 integer digits) and, for ``number``,
    ``multipleOf`` 1e-10 (at most 10 fraction digits, no exponent)."""
    for subschema in subschemas(schema):
        types = number_types(subschema)
        if not types:
            continue
        if not has_lower_bound(subschema):
            subschema["minimum"] = -NUMBER_LIMIT
        if not has_upper_bound(subschema):
            subschema["maximum"] = NUMBER_LIMIT
        if "number" in types and "multipleOf" not in subschema:
            subschema["multipleOf"] = FRACTION_STEP
    return schema


JSON_OBJECT = {"type": "object", "additionalProperties": {"$ref": "#/$defs/value"}, "$defs": {"value": {"anyOf": [
    {"type": "number"}, {"type": "string"}, {"type": "boolean"}, {"type": "null"},
    {"type": "array", "items": {"$ref": "#/$defs/value"}},
    {"type": "object", "additionalProperties": {"$ref": "#/$defs/value"}},
]}}}
"""Any JSON object, spelled out so that :func:`bound_numbers` reaches the numbers of its values."""


def _json_options(constraint: ConstraintSpec, coerce_one_of: bool) -> JsonCompileOptions:
    options: JsonCompileOptions = {"coerce_one_of": coerce_one_of}
    pattern = constraint.whitespace_pattern or (BOUNDED_WHITESPACE if constraint.whitespace == "bounded" else None)
    if pattern is not None:
        options["whitespace_flexible"] = True
        options["whitespace_pattern"] = pattern
    else:
        options["whitespace_flexible"] = constraint.whitespace == "any"
        options["item_separator"] = ","
        options["key_separator"] = ":"
    return options


def _grammar(constraint: ConstraintSpec, coerce_one_of: bool) -> str:
    """The llguidance grammar (JSON or Lark text) of ``constraint``."""
    kind = constraint.kind
    if kind in ("json_schema", "json_object"):
        schema = str(constraint.json_schema) if kind == "json_schema" else '{"type": "object"}'
        if constraint.bounded_numbers:
            schema = json.dumps(bound_numbers(json.loads(schema) if kind == "json_schema" else JSON_OBJECT))
        options = _json_options(constraint, coerce_one_of)
        return str(llg.LLMatcher.grammar_from_json_schema(schema, overrides=options))
    if kind == "regex":
        return str(llg.LLMatcher.grammar_from_regex(str(constraint.regex)))
    if kind == "choice":
        choices = " | ".join(json.dumps(c) for c in constraint.choice or ())
        return str(llg.LLMatcher.grammar_from_lark(f"start: {choices}"))
    text = str(constraint.grammar)
    lark = text if constraint.grammar_dialect == "lark" else gbnf_to_lark(text)
    return str(llg.LLMatcher.grammar_from_lark(lark))
