"""Epsilon and eta sampling: drop tokens below a probability cutoff (transformers' definitions)."""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Mapping
from typing import Any, ClassVar

import torch

from pyagent_sampler_base.multi_param import MultiParamProcessor, ParamCheck
from pyagent_sampler_base.precision import working_dtype
from pyagent_samplers_truncation.params import EPSILON_CUTOFF, ETA_CUTOFF


class CutoffProcessor(MultiParamProcessor):
    """Removes the tokens whose probability is below a per-row cutoff, except the most likely ones.

    As in transformers' warpers with ``min_tokens_to_keep=1``, a token is removed when
    ``p < cutoff`` and its logit is below the row's largest, so the most likely token (and any tied
    with it) always stays. A parameter of 0 turns the processor off.
    """

    def is_argmax_invariant(self) -> bool:
        """True: the largest logit is never removed."""
        return True

    def is_active(self, values: Mapping[str, Any]) -> bool:
        """Rows whose cutoff parameter is above 0."""
        return bool(values[self.request_params[0].name] > 0)

    def process(self, logits: torch.Tensor, rows: list[int]) -> torch.Tensor:
        """Mask each row's tokens below its cutoff."""
        scores = logits.to(working_dtype(logits))
        epsilon = torch.tensor([self.rows[r].values[self.request_params[0].name] for r in rows],
                               dtype=scores.dtype, device=scores.device).unsqueeze(1)
        remove = (scores.softmax(dim=-1) < self.cutoff(scores, epsilon)) & (
            scores < scores.max(dim=-1, keepdim=True).values
        )
        return scores.masked_fill(remove, float("-inf"))

    @abstractmethod
    def cutoff(self, scores: torch.Tensor, epsilon: torch.Tensor) -> torch.Tensor:
        """The ``[rows, 1]`` probability cutoff of each row, given its parameter ``epsilon``."""


class EpsilonProcessor(CutoffProcessor):
    """Epsilon sampling: removes tokens with probability below ``epsilon_cutoff``."""

    request_params: ClassVar[tuple[ParamCheck, ...]] = (EPSILON_CUTOFF,)
    neutral: ClassVar[Mapping[str, Any]] = {"epsilon_cutoff": 0.0}
    label: ClassVar[str] = "epsilon sampler"

    def cutoff(self, scores: torch.Tensor, epsilon: torch.Tensor) -> torch.Tensor:
        """The parameter itself."""
        return epsilon


class EtaProcessor(CutoffProcessor):
    """Eta sampling: the cutoff is ``min(eta, sqrt(eta) * exp(-H))`` with ``H`` the row's entropy."""

    request_params: ClassVar[tuple[ParamCheck, ...]] = (ETA_CUTOFF,)
    neutral: ClassVar[Mapping[str, Any]] = {"eta_cutoff": 0.0}
    label: ClassVar[str] = "eta sampler"

    def cutoff(self, scores: torch.Tensor, epsilon: torch.Tensor) -> torch.Tensor:
        """The entropy-scaled cutoff; log-probabilities of masked tokens count as the dtype's minimum."""
        log_probs = scores - scores.logsumexp(dim=-1, keepdim=True)
        clamped = log_probs.clamp(min=torch.finfo(scores.dtype).min)
        entropy = -(clamped * log_probs.softmax(dim=-1)).sum(dim=-1, keepdim=True)
        return torch.minimum(epsilon, epsilon.sqrt() * torch.exp(-entropy))
