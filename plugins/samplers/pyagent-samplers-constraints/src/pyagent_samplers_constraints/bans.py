"""Token bans: suppressed tokens, allowed token ids, bad words, no-repeat n-grams and min tokens."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from pyagent_sampler_base.multi_param import ParamCheck, ParamRow
from pyagent_samplers_constraints.constraint import BanProcessor
from pyagent_samplers_constraints.params import (
    ALLOWED_TOKEN_IDS,
    BAD_WORDS_IDS,
    EOS_TOKEN_IDS,
    MIN_TOKENS,
    NO_REPEAT_NGRAM_SIZE,
    SUPPRESS_TOKENS,
)


class SuppressTokensProcessor(BanProcessor):
    """Bans the ``suppress_tokens`` at every step (transformers' ``SuppressTokensLogitsProcessor``)."""

    request_params: ClassVar[tuple[ParamCheck, ...]] = (SUPPRESS_TOKENS,)
    neutral: ClassVar[Mapping[str, Any]] = {"suppress_tokens": ()}
    label: ClassVar[str] = "suppress_tokens sampler"
    token_id_params = ("suppress_tokens",)

    def is_active(self, values: Mapping[str, Any]) -> bool:
        """Rows with tokens to suppress."""
        return bool(values["suppress_tokens"])

    def banned_tokens(self, row: ParamRow) -> set[int]:
        """The suppressed tokens."""
        return set(row.values["suppress_tokens"])


class AllowedTokensProcessor(BanProcessor):
    """Bans every token but the ``allowed_token_ids`` (vLLM's ``allowed_token_ids``)."""

    request_params: ClassVar[tuple[ParamCheck, ...]] = (ALLOWED_TOKEN_IDS,)
    neutral: ClassVar[Mapping[str, Any]] = {"allowed_token_ids": ()}
    label: ClassVar[str] = "allowed_token_ids sampler"
    token_id_params = ("allowed_token_ids",)

    def is_active(self, values: Mapping[str, Any]) -> bool:
        """Rows with a non-empty allow list (an empty or unset list allows everything)."""
        return bool(values["allowed_token_ids"])

    def banned_tokens(self, row: ParamRow) -> set[int]:
        """Every token not in the allow list."""
        return set(range(self.vocab_size)) - set(row.values["allowed_token_ids"])


class BadWordsProcessor(BanProcessor):
    """Bans the token that would complete one of the ``bad_words_ids`` sequences.

    As transformers' ``NoBadWordsLogitsProcessor``: a one-token sequence is always banned; the last
    token of a longer one is banned when the context (prompt and output) ends with the rest of it.
    """

    request_params: ClassVar[tuple[ParamCheck, ...]] = (BAD_WORDS_IDS,)
    neutral: ClassVar[Mapping[str, Any]] = {"bad_words_ids": ()}
    label: ClassVar[str] = "bad_words sampler"
    token_id_params = ("bad_words_ids",)

    def is_active(self, values: Mapping[str, Any]) -> bool:
        """Rows with bad words."""
        return bool(values["bad_words_ids"])

    def banned_tokens(self, row: ParamRow) -> set[int]:
        """The last tokens of the sequences whose prefix ends the context."""
        longest = max(len(s) for s in row.values["bad_words_ids"])
        tail = row.context(longest - 1) if longest > 1 else []
        return {
            int(s[-1]) for s in row.values["bad_words_ids"]
            if len(s) == 1 or (len(s) - 1 <= len(tail) and list(s[:-1]) == tail[len(tail) - len(s) + 1:])
        }


class NoRepeatNgramProcessor(BanProcessor):
    """Bans every token that would repeat an n-gram of the context (prompt and output), as
    transformers' ``NoRepeatNGramLogitsProcessor`` with ``no_repeat_ngram_size`` n.
    """

    request_params: ClassVar[tuple[ParamCheck, ...]] = (NO_REPEAT_NGRAM_SIZE,)
    neutral: ClassVar[Mapping[str, Any]] = {"no_repeat_ngram_size": 0}
    label: ClassVar[str] = "no_repeat_ngram sampler"

    def is_active(self, values: Mapping[str, Any]) -> bool:
        """Rows with ``no_repeat_ngram_size > 0``."""
        return bool(values["no_repeat_ngram_size"] > 0)

    def banned_tokens(self, row: ParamRow) -> set[int]:
        """The tokens that followed an earlier occurrence of the context's last n - 1 tokens."""
        n = row.values["no_repeat_ngram_size"]
        tokens = row.context()
        if len(tokens) < n:
            return set()
        prefix = tokens[len(tokens) - n + 1:]
        return {tokens[i + n - 1] for i in range(len(tokens) - n + 1) if tokens[i:i + n - 1] == prefix}


class MinTokensProcessor(BanProcessor):
    """Bans the ``eos_token_ids`` until the request has generated ``min_tokens`` tokens (vLLM's
    ``min_tokens``; transformers' ``MinNewTokensLengthLogitsProcessor``). The engine passes the model's
    end-of-sequence ids and the request's ``stop_token_ids`` as ``eos_token_ids``.
    """

    request_params: ClassVar[tuple[ParamCheck, ...]] = (MIN_TOKENS, EOS_TOKEN_IDS)
    neutral: ClassVar[Mapping[str, Any]] = {"min_tokens": 0, "eos_token_ids": ()}
    label: ClassVar[str] = "min_tokens sampler"
    token_id_params = ("eos_token_ids",)

    def is_active(self, values: Mapping[str, Any]) -> bool:
        """Rows with ``min_tokens > 0`` and end-of-sequence ids to hold back."""
        return bool(values["min_tokens"] > 0 and values["eos_token_ids"])

    def banned_tokens(self, row: ParamRow) -> set[int]:
        """The end-of-sequence ids while fewer than ``min_tokens`` tokens were generated."""
        if len(row.request.output_token_ids) >= row.values["min_tokens"]:
            return set()
        return set(row.values["eos_token_ids"])
