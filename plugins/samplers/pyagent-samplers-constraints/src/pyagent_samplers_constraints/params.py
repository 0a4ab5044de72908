"""The per-request parameters of the constraint samplers, with their ranges."""

from __future__ import annotations

from pyagent_sampler_base.request_params import RequestParam
from pyagent_sampler_base.token_params import TokenBiasParam, TokenIdsParam, TokenSequencesParam

NO_REPEAT_NGRAM_SIZE = RequestParam(
    name="no_repeat_ngram_size", integer=True, min=0, allowed="an integer >= 0 (0 turns it off)",
)
LOGIT_BIAS = TokenBiasParam(name="logit_bias")
BAD_WORDS_IDS = TokenSequencesParam(name="bad_words_ids")
ALLOWED_TOKEN_IDS = TokenIdsParam(name="allowed_token_ids")
SUPPRESS_TOKENS = TokenIdsParam(name="suppress_tokens")
MIN_TOKENS = RequestParam(
    name="min_tokens", integer=True, min=0, allowed="an integer >= 0 (0 turns it off)",
)
EOS_TOKEN_IDS = TokenIdsParam(name="eos_token_ids")
