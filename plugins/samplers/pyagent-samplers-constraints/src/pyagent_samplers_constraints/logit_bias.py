"""Logit bias: add a per-request bias to chosen tokens (OpenAI's ``logit_bias``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import torch

from pyagent_sampler_base.multi_param import MultiParamProcessor, ParamCheck
from pyagent_sampler_base.precision import working_dtype
from pyagent_sampler_base.token_params import bias_items, check_in_vocab
from pyagent_samplers_constraints.params import LOGIT_BIAS


class LogitBiasProcessor(MultiParamProcessor):
    """Adds ``logit_bias[token]`` (a number in [-100, 100]) to the token's logit in the request's row.

    Keys may be token ids or their decimal strings (as JSON objects write them); ``-inf`` logits stay
    ``-inf``.
    """

    request_params: ClassVar[tuple[ParamCheck, ...]] = (LOGIT_BIAS,)
    neutral: ClassVar[Mapping[str, Any]] = {"logit_bias": {}}
    label: ClassVar[str] = "logit_bias sampler"

    def is_argmax_invariant(self) -> bool:
        """False: a bias can promote any token."""
        return False

    def is_active(self, values: Mapping[str, Any]) -> bool:
        """Rows with a non-empty bias."""
        return bool(values["logit_bias"])

    def check_values(self, values: Mapping[str, Any], where: str) -> None:
        """Biased token ids must lie in the vocabulary."""
        check_in_vocab("logit_bias", [t for t, _ in bias_items(values["logit_bias"])], self.vocab_size, where)

    def process(self, logits: torch.Tensor, rows: list[int]) -> torch.Tensor:
        """Add each row's biases."""
        bias = torch.zeros(logits.shape, dtype=working_dtype(logits))
        for i, row in enumerate(rows):
            for token, value in bias_items(self.rows[row].values["logit_bias"]):
                bias[i, token] = value
        return logits.to(bias.dtype) + bias.to(logits.device)
