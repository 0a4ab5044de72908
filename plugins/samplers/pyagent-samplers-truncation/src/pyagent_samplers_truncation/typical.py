"""Locally typical sampling with the semantics of transformers' ``TypicalLogitsWarper``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import torch

from pyagent_sampler_base.multi_param import MultiParamProcessor, ParamCheck
from pyagent_sampler_base.precision import working_dtype
from pyagent_samplers_truncation.params import TYPICAL_P


class TypicalProcessor(MultiParamProcessor):
    """Keeps the tokens whose surprise ``-log p`` is closest to the row's entropy, up to mass ``typical_p``.

    As in ``TypicalLogitsWarper`` with ``min_tokens_to_keep=1``: tokens are ordered by
    ``|-log p - H|``; the kept set ends at the first token where the cumulative probability reaches
    ``typical_p`` and also holds every token with the same score; the most typical token is always
    kept. ``typical_p=1`` turns it off. The most likely token can be removed.
    """

    request_params: ClassVar[tuple[ParamCheck, ...]] = (TYPICAL_P,)
    neutral: ClassVar[Mapping[str, Any]] = {"typical_p": 1.0}
    label: ClassVar[str] = "typical sampler"

    def is_argmax_invariant(self) -> bool:
        """False: a very likely token can be less typical than the rest."""
        return False

    def is_active(self, values: Mapping[str, Any]) -> bool:
        """Rows with ``typical_p < 1``."""
        return bool(values["typical_p"] < 1)

    def process(self, logits: torch.Tensor, rows: list[int]) -> torch.Tensor:
        """Mask the atypical tokens of each row with one sort over the rows."""
        scores = logits.to(working_dtype(logits))
        mass = torch.tensor([self.rows[r].values["typical_p"] for r in rows], dtype=scores.dtype,
                            device=scores.device)
        log_probs = scores.log_softmax(dim=-1)
        entropy = -(log_probs * log_probs.exp()).nansum(-1, keepdim=True)
        shifted = (-log_probs - entropy).abs()
        sorted_scores, order = shifted.sort(dim=-1, stable=True)
        cumulative = scores.gather(-1, order).softmax(dim=-1).cumsum(dim=-1)
        last = (cumulative < mass.unsqueeze(1)).sum(dim=1).clamp_(max=scores.shape[1] - 1)
        remove_sorted = sorted_scores > sorted_scores.gather(1, last.unsqueeze(1))
        remove_sorted[:, 0] = False
        remove = remove_sorted.scatter(1, order, remove_sorted)
        return scores.masked_fill(remove, float("-inf"))
