"""Registers the constraint samplers. Imported while listing plugins: no torch, no implementations."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

from pyagent_core import OptionSpec, SamplerSpec, hookimpl
from pyagent_core.install import checkout_install_hint

PACKAGE = "pyagent_samplers_constraints"
INSTALL_HINT = checkout_install_hint("pyagent-samplers-constraints", "plugins/samplers/pyagent-samplers-constraints")
EMPTIED_ROWS = " A ban that would remove every token left in a row is skipped for that row and step."


@hookimpl
def pyagent_register_samplers(register: Callable[[SamplerSpec], None]) -> None:
    """Register logit_bias, bad_words, allowed_token_ids, suppress_tokens, min_tokens and no_repeat_ngram."""
    spec = partial(SamplerSpec, priority=0, requires=("torch",), install_hint=INSTALL_HINT, argmax_invariant=False,
                   stage="constraints")
    register(spec(
        name="logit_bias",
        position=10,
        impl=f"{PACKAGE}.logit_bias:LogitBiasProcessor",
        summary="Adds the request's logit_bias (token id -> bias in [-100, 100]) to those tokens.",
        description="Per-request parameter 'logit_bias', a mapping of token id (or its decimal string) to bias.",
        options={"logit_bias": OptionSpec(
            type=dict[int, float], help="token id -> bias in [-100, 100] of requests that set none",
            request=True, request_help="TOKEN_ID=BIAS with BIAS in [-100, 100] (repeatable).")},
    ))
    register(spec(
        name="bad_words",
        position=20,
        impl=f"{PACKAGE}.bans:BadWordsProcessor",
        summary="Bans the token that would complete one of the request's bad_words_ids sequences.",
        description=(
            "Per-request parameter 'bad_words_ids' (a list of token id sequences). Semantics of "
            "transformers' NoBadWordsLogitsProcessor over the prompt and output." + EMPTIED_ROWS
        ),
        options={"bad_words_ids": OptionSpec(
            type=list[list[int]], help="banned token id sequences of requests that set none",
            request=True, request_help="A banned token id sequence, e.g. 12,7 (repeatable).")},
    ))
    register(spec(
        name="allowed_token_ids",
        position=30,
        impl=f"{PACKAGE}.bans:AllowedTokensProcessor",
        summary="Bans every token but the request's allowed_token_ids.",
        description="Per-request parameter 'allowed_token_ids' (a list; empty or unset: off)." + EMPTIED_ROWS,
        options={"allowed_token_ids": OptionSpec(
            type=list[int], help="the only token ids requests that set none may generate",
            request=True, request_help="Only these token ids, e.g. 1,2,3.")},
    ))
    register(spec(
        name="suppress_tokens",
        position=40,
        impl=f"{PACKAGE}.bans:SuppressTokensProcessor",
        summary="Bans the request's suppress_tokens at every step.",
        description="Per-request parameter 'suppress_tokens' (a list of token ids)." + EMPTIED_ROWS,
        options={"suppress_tokens": OptionSpec(
            type=list[int], help="token ids requests that set none never generate",
            request=True, request_help="Never these token ids, e.g. 1,2,3.")},
    ))
    register(spec(
        name="min_tokens",
        position=50,
        impl=f"{PACKAGE}.bans:MinTokensProcessor",
        summary="Bans end-of-sequence tokens until the request has generated min_tokens tokens.",
        description=(
            "Per-request parameters 'min_tokens' (an integer >= 0, 0: off) and 'eos_token_ids' (the "
            "engine passes the model's end-of-sequence ids and the request's stop_token_ids)." + EMPTIED_ROWS
        ),
        options={"min_tokens": OptionSpec(
            type=int, default=0, min=0, help="tokens generated before end-of-sequence is allowed (0: off)",
            request=True, request_help="Tokens to generate before end-of-sequence is allowed, >= 0.")},
    ))
    register(spec(
        name="no_repeat_ngram",
        position=60,
        impl=f"{PACKAGE}.bans:NoRepeatNgramProcessor",
        summary="Bans every token that would repeat an n-gram of the prompt and output.",
        description=(
            "Per-request parameter 'no_repeat_ngram_size' (an integer >= 0, 0: off). Semantics of "
            "transformers' NoRepeatNGramLogitsProcessor." + EMPTIED_ROWS
        ),
        options={"no_repeat_ngram_size": OptionSpec(
            type=int, default=0, min=0, help="n-gram size (0: off)",
            request=True, request_help="Ban repeating any n-gram of this size, >= 0 (0: off).")},
    ))
