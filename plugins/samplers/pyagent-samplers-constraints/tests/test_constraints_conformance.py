"""The conformance kit run against every constraint sampler."""

from __future__ import annotations

from pyagent_core.testing.sampler import SamplerConformance, registered_sampler_specs
from pyagent_samplers_constraints import plugin
from pyagent_samplers_constraints.bans import (
    AllowedTokensProcessor,
    BadWordsProcessor,
    MinTokensProcessor,
    NoRepeatNgramProcessor,
    SuppressTokensProcessor,
)
from pyagent_samplers_constraints.logit_bias import LogitBiasProcessor

SPECS = registered_sampler_specs(plugin.pyagent_register_samplers)
BAD_ID_LISTS = ([-1], [1.5], "5", [64], [True])


class TestLogitBias(SamplerConformance):
    impl = LogitBiasProcessor
    spec = SPECS["logit_bias"]
    request_params = ({"logit_bias": {3: 5.0, 7: -100}}, {"logit_bias": {"10": 2.5}}, {"logit_bias": {0: 100}})
    disabled_params = ({}, {"logit_bias": {}})
    invalid_request_params = (
        {"logit_bias": {3: 101.0}}, {"logit_bias": {-1: 1.0}}, {"logit_bias": {64: 1.0}},
        {"logit_bias": {"x": 1.0}}, {"logit_bias": [3, 4]}, {"logit_bias": {3: float("nan")}},
    )


class TestBadWords(SamplerConformance):
    impl = BadWordsProcessor
    spec = SPECS["bad_words"]
    request_params = ({"bad_words_ids": [[5], [2, 3], [1, 2, 9]]}, {"bad_words_ids": [[4, 7], [7]]})
    disabled_params = ({}, {"bad_words_ids": []})
    invalid_request_params = ({"bad_words_ids": [[]]}, {"bad_words_ids": [5]}, {"bad_words_ids": [[64]]})


class TestAllowedTokens(SamplerConformance):
    impl = AllowedTokensProcessor
    spec = SPECS["allowed_token_ids"]
    request_params = ({"allowed_token_ids": [1, 2, 3]}, {"allowed_token_ids": list(range(0, 64, 2))})
    disabled_params = ({}, {"allowed_token_ids": []})
    invalid_request_params = tuple({"allowed_token_ids": v} for v in BAD_ID_LISTS)


class TestSuppressTokens(SamplerConformance):
    impl = SuppressTokensProcessor
    spec = SPECS["suppress_tokens"]
    request_params = ({"suppress_tokens": [0, 5]}, {"suppress_tokens": list(range(1, 64))})
    disabled_params = ({}, {"suppress_tokens": []})
    invalid_request_params = tuple({"suppress_tokens": v} for v in BAD_ID_LISTS)


class TestMinTokens(SamplerConformance):
    impl = MinTokensProcessor
    spec = SPECS["min_tokens"]
    request_params = ({"min_tokens": 3, "eos_token_ids": [2, 9]}, {"min_tokens": 100, "eos_token_ids": [0]})
    disabled_params = ({}, {"min_tokens": 0, "eos_token_ids": [2]}, {"min_tokens": 5})
    invalid_request_params = ({"min_tokens": -1}, {"min_tokens": 2.0}, {"eos_token_ids": [64]})


class TestNoRepeatNgram(SamplerConformance):
    impl = NoRepeatNgramProcessor
    spec = SPECS["no_repeat_ngram"]
    request_params = ({"no_repeat_ngram_size": 1}, {"no_repeat_ngram_size": 2}, {"no_repeat_ngram_size": 3})
    disabled_params = ({}, {"no_repeat_ngram_size": 0})
    invalid_request_params = ({"no_repeat_ngram_size": -1}, {"no_repeat_ngram_size": 1.5})
