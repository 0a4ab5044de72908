"""lm-format-enforcer behind pyagent's grammar interface, through its core API.

The tokenizer data is built from :class:`TokenizerInfo` with ``TokenEnforcerTokenizerData`` (the
library's transformers integration is not used). lm-format-enforcer walks characters, so only tokens
that decode to whole UTF-8 characters are given to it; the others (byte pieces of a multi-byte
character) are never allowed. Each matcher owns a ``TokenEnforcer``, which caches the allowed tokens
per prefix: rollback and reset just shorten the prefix. End-of-sequence is kept out of the prefix
and only sets the matcher's ``terminated`` flag.

When its parser fails on a schema it cannot walk, the library logs the traceback on the root logger
(configuring logging first when nothing has) and offers only end-of-sequence. The matchers' enforcer
turns such a failure into an exception instead, so nothing reaches the user's terminal and the
request fails with the library's message.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

import numpy as np
from lmformatenforcer import (
    CharacterLevelParser,
    CharacterLevelParserConfig,
    JsonSchemaParser,
    LMFormatEnforcerException,
    RegexParser,
    StringParser,
    TokenEnforcer,
    TokenEnforcerTokenizerData,
    UnionParser,
)

from pyagent_core.interfaces.grammar import (
    CompiledGrammar,
    ConstraintSpec,
    GrammarBackend,
    GrammarContext,
    GrammarMatcher,
    TokenizerInfo,
)
from pyagent_grammar_lmfe.plugin import UNENFORCED_KEYWORDS

if TYPE_CHECKING:
    import torch

_SCHEMA_MAPS = ("properties", "$defs", "definitions")
_SCHEMA_LISTS = ("anyOf", "allOf", "oneOf")


_PARSEABLE = ("type", "enum", "const", "anyOf", "allOf", "oneOf", "$ref")


def unenforced_keywords(schema: Any) -> Iterator[str]:
    """What lm-format-enforcer would ignore or fail on in ``schema`` and its subschemas.

    Validation keywords it ignores are named as they are; a ``pattern`` next to ``minLength`` or
    ``maxLength`` is ``pattern+length`` and a subschema with none of ``type``, ``enum``, ``const``,
    ``anyOf``, ``allOf``, ``oneOf``, ``$ref`` is ``untyped``: the library raises on both in the
    middle of generation (and then offers only end-of-sequence).
    """
    if not isinstance(schema, dict):
        return
    if "pattern" in schema and ("minLength" in schema or "maxLength" in schema):
        yield "pattern+length"
    if not any(key in schema for key in _PARSEABLE):
        yield "untyped"
    for key, value in schema.items():
        if key in UNENFORCED_KEYWORDS:
            yield key
        if key in _SCHEMA_MAPS and isinstance(value, dict):
            for sub in value.values():
                yield from unenforced_keywords(sub)
        elif key in _SCHEMA_LISTS and isinstance(value, list):
            for sub in value:
                yield from unenforced_keywords(sub)
        elif key == "items" or (key == "additionalProperties" and isinstance(value, dict)):
            yield from unenforced_keywords(value)


def _whole_characters(token: bytes) -> str | None:
    try:
        return token.decode("utf-8")
    except UnicodeDecodeError:
        return None


class _RaisingEnforcer(TokenEnforcer):
    """A ``TokenEnforcer`` whose parser failures propagate (as ``LMFormatEnforcerException``, which the
    library re-raises) instead of being logged with a traceback and answered with end-of-sequence."""

    def _collect_allowed_tokens(self, parser: CharacterLevelParser, tree_node: Any, allowed_tokens: Any,
                                shortcut_key: Any) -> None:
        try:
            super()._collect_allowed_tokens(parser, tree_node, allowed_tokens, shortcut_key)
        except LMFormatEnforcerException:
            raise
        except Exception as exc:
            raise LMFormatEnforcerException(f"{type(exc).__name__}: {exc}") from exc


class LmfeMatcher(GrammarMatcher):
    """One request's prefix of tokens, with the mask of the current prefix kept."""

    def __init__(self, compiled: LmfeCompiled) -> None:
        self._enforcer = _RaisingEnforcer(compiled.data, compiled.parser)
        # TokenEnforcer replaces the parser's config with one holding the vocabulary's alphabet only.
        compiled.parser.config = compiled.config
        self._vocab_len = len(compiled.info.vocab)
        self._words = (compiled.info.vocab_size + 31) // 32
        self._eos = frozenset(compiled.info.eos_token_ids)
        self._tokens: list[int] = []
        self._terminated = False
        self._mask: np.ndarray | None = None

    def _current_mask(self) -> np.ndarray:
        """``uint32 [words]``: the tokens allowed after the current prefix."""
        if self._mask is None:
            mask = np.zeros(self._words, dtype=np.uint32)
            if not self._terminated:
                try:
                    allowed = self._enforcer.get_allowed_tokens(self._tokens).allowed_tokens
                except LMFormatEnforcerException as exc:
                    self._enforcer.prefix_states.pop(tuple(self._tokens), None)  # its allowed tokens were never set
                    raise RuntimeError(f"lm-format-enforcer failed after {len(self._tokens)} tokens ({exc}); "
                                       "the constraint cannot be served by this backend") from None
                ids = np.fromiter(allowed, dtype=np.int64)
                np.bitwise_or.at(mask, ids >> 5, np.left_shift(1, ids & 31).astype(np.uint32))
            self._mask = mask
        return self._mask

    def accept_token(self, token_id: int) -> bool:
        """Append ``token_id`` to the prefix when the current mask allows it."""
        if self._terminated or not 0 <= token_id < self._vocab_len:
            return False
        if not int(self._current_mask()[token_id >> 5]) >> (token_id & 31) & 1:
            return False
        if token_id in self._eos:
            self._terminated = True
        else:
            self._tokens.append(token_id)
        self._mask = None
        return True

    def fill_bitmask(self, bitmask: torch.Tensor, row: int) -> None:
        """Write the allowed tokens into ``bitmask[row]``; none once terminated."""
        import torch

        bitmask[row] = torch.from_numpy(self._current_mask().view(np.int32))

    def rollback(self, num_tokens: int) -> None:
        """Shorten the prefix by ``num_tokens`` (an accepted end-of-sequence counts as one)."""
        accepted = len(self._tokens) + self._terminated
        if not 0 <= num_tokens <= accepted:
            raise ValueError(f"cannot roll back {num_tokens} tokens: {accepted} were accepted")
        if num_tokens and self._terminated:
            self._terminated = False
            num_tokens -= 1
        del self._tokens[len(self._tokens) - num_tokens:]
        self._mask = None

    def is_terminated(self) -> bool:
        """True once an end-of-sequence token was accepted."""
        return self._terminated

    def reset(self) -> None:
        """Back to the empty prefix."""
        self._tokens.clear()
        self._terminated = False
        self._mask = None


class LmfeCompiled(CompiledGrammar):
    """The root character-level parser of a constraint, with the tokenizer data it runs over."""

    def __init__(self, parser: CharacterLevelParser, data: TokenEnforcerTokenizerData,
                 config: CharacterLevelParserConfig, info: TokenizerInfo) -> None:
        self.parser = parser
        self.data = data
        self.config = config
        self.info = info

    def matcher(self) -> LmfeMatcher:
        """A fresh matcher at the empty prefix."""
        return LmfeMatcher(self)


class LmfeBackend(GrammarBackend):
    """Builds lm-format-enforcer parsers over one ``TokenEnforcerTokenizerData``."""

    def __init__(self, options: Mapping[str, Any], context: GrammarContext) -> None:
        super().__init__(options, context)
        tokenizer_info = context.tokenizer_info
        hidden = {*tokenizer_info.eos_token_ids, *tokenizer_info.special_token_ids}
        regular = []
        for token_id, token in enumerate(tokenizer_info.vocab):
            text = _whole_characters(token)
            if token_id not in hidden and text:
                regular.append((token_id, text, True))
        self._data = TokenEnforcerTokenizerData(
            regular, self._decode, eos_token_id=list(tokenizer_info.eos_token_ids), use_bitmask=False,
            vocab_size=tokenizer_info.vocab_size,
        )
        self._config = CharacterLevelParserConfig(
            alphabet=self._data.tokenizer_alphabet,
            max_consecutive_whitespaces=int(self.options["max_consecutive_whitespaces"]),
            max_json_array_length=int(self.options["max_array_length"]),
        )

    def _decode(self, token_ids: list[int]) -> str:
        return self.tokenizer_info.decode(token_ids).decode("utf-8", errors="replace")

    def supports(self, constraint: ConstraintSpec) -> str | None:
        """JSON with free whitespace, regex and choice; strict mode refuses unenforced keywords."""
        kind = constraint.kind
        if kind not in ("json_schema", "json_object", "regex", "choice"):
            return f"lm-format-enforcer does not compile {kind} constraints"
        if kind in ("regex", "choice"):
            return None
        if constraint.whitespace == "compact" or constraint.whitespace_pattern is not None:
            return ("lm-format-enforcer always allows free whitespace in JSON (up to max_consecutive_whitespaces "
                    "characters in a row); it cannot enforce a compact form or a whitespace pattern")
        if kind == "json_schema" and self.options["strict"]:
            try:
                schema = json.loads(str(constraint.json_schema))
            except ValueError:
                return None  # compile() reports the malformed schema
            ignored = sorted(set(unenforced_keywords(schema)))
            if ignored:
                return (f"lm-format-enforcer does not enforce the keywords {ignored} of this schema "
                        "(strict=true refuses it; strict=false would ignore them)")
        return None

    def compile(self, constraint: ConstraintSpec) -> LmfeCompiled:
        """Build the root parser; ``ValueError`` when the constraint is malformed."""
        self.check_supported(constraint)
        try:
            parser = self._parser(constraint)
        # lm-format-enforcer raises bare Exception for schema constructs it lacks ("Unsupported type")
        except Exception as error:
            raise ValueError(f"lm-format-enforcer cannot compile this {constraint.kind} constraint: "
                             f"{type(error).__name__}: {error}") from None
        parser.config = self._config
        return LmfeCompiled(parser, self._data, self._config, self.tokenizer_info)

    def _parser(self, constraint: ConstraintSpec) -> CharacterLevelParser:
        kind = constraint.kind
        if kind == "regex":
            return RegexParser(str(constraint.regex), self._config)
        if kind == "choice":
            return UnionParser([StringParser(choice) for choice in constraint.choice or ()])
        schema = json.loads(str(constraint.json_schema)) if kind == "json_schema" else {"type": "object"}
        if not isinstance(schema, dict):
            raise ValueError(f"a JSON schema must be an object, got {type(schema).__name__}")
        _check_types(schema)
        return JsonSchemaParser(schema, self._config)


_JSON_TYPES = frozenset({"object", "array", "string", "number", "integer", "boolean", "null"})


def _check_types(schema: Any) -> None:
    """Raise ``ValueError`` for a ``type`` that is not a JSON type (lm-format-enforcer would fail late)."""
    if isinstance(schema, dict):
        declared = schema.get("type")
        for name in declared if isinstance(declared, list) else [declared] if declared is not None else []:
            if name not in _JSON_TYPES:
                raise ValueError(f"unknown JSON type {name!r}; use one of {', '.join(sorted(_JSON_TYPES))}")
        for value in schema.values():
            _check_types(value)
    elif isinstance(schema, list):
        for value in schema:
            _check_types(value)
