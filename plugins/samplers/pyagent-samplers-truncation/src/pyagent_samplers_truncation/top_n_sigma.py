"""Top-nσ: keep the tokens whose logit is within n standard deviations of the largest (llama.cpp)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import torch

from pyagent_sampler_base.multi_param import MultiParamProcessor, ParamCheck
from pyagent_sampler_base.precision import working_dtype
from pyagent_samplers_truncation.params import TOP_N_SIGMA


class TopNSigmaProcessor(MultiParamProcessor):
    """Masks every logit below ``max - n * sigma``, with the mean and (population) standard deviation
    taken over the row's finite logits, as llama.cpp's ``top-n-sigma`` sampler. ``top_n_sigma=0``
    turns it off. Scaling a row by a temperature scales ``max`` and ``sigma`` alike, so the kept set
    does not depend on the temperature.
    """

    request_params: ClassVar[tuple[ParamCheck, ...]] = (TOP_N_SIGMA,)
    neutral: ClassVar[Mapping[str, Any]] = {"top_n_sigma": 0.0}
    label: ClassVar[str] = "top_n_sigma sampler"

    def is_argmax_invariant(self) -> bool:
        """True: the largest logit is never below the threshold."""
        return True

    def is_active(self, values: Mapping[str, Any]) -> bool:
        """Rows with ``top_n_sigma > 0``."""
        return bool(values["top_n_sigma"] > 0)

    def process(self, logits: torch.Tensor, rows: list[int]) -> torch.Tensor:
        """Mask each row below its threshold."""
        scores = logits.to(working_dtype(logits))
        n = torch.tensor([self.rows[r].values["top_n_sigma"] for r in rows], dtype=scores.dtype,
                         device=scores.device).unsqueeze(1)
        finite = torch.isfinite(scores)
        count = finite.sum(dim=1, keepdim=True).clamp_(min=1)
        mean = torch.where(finite, scores, 0.0).sum(dim=1, keepdim=True) / count
        variance = torch.where(finite, (scores - mean).square(), 0.0).sum(dim=1, keepdim=True) / count
        largest = torch.where(finite, scores, float("-inf")).max(dim=1, keepdim=True).values
        return scores.masked_fill(scores < largest - n * variance.sqrt(), float("-inf"))
