"""Top-k filtering: keep each row's k largest logits (and every logit tied with the k-th)."""

from __future__ import annotations

from typing import Any, ClassVar

import torch

from pyagent_core.interfaces.sampler import FusableMaskStep
from pyagent_sampler_base.request_params import RequestParam
from pyagent_sampler_base.row_param_processor import RowParamProcessor


class TopKProcessor(RowParamProcessor, FusableMaskStep):
    """Sets to ``-inf`` every logit smaller than the row's k-th largest; ``top_k=0`` turns it off.

    Logits equal to the k-th largest are kept, so ties can keep more than k tokens; a k at least
    the vocabulary size keeps every token.
    """

    request_param: ClassVar[RequestParam] = RequestParam(
        name="top_k", integer=True, min=0, allowed="an integer >= 0 (0 turns top-k off)"
    )
    neutral: ClassVar[Any] = 0
    # one step of the fused mask (FusableMaskStep): a host may run it with its neighbours as one kernel call
    mask_step: ClassVar[str] = "top_k"

    def is_argmax_invariant(self) -> bool:
        """True: the largest logit is never below the k-th largest."""
        return True

    def process(self, logits: torch.Tensor, values: list[Any]) -> torch.Tensor:
        """Mask each row below its k-th largest logit, in place, with one ``topk`` over the batch."""
        vocab_size = logits.shape[1]
        k = torch.tensor(values, dtype=torch.int64, device=logits.device).clamp_(max=vocab_size)
        largest = torch.topk(logits, min(max(values), vocab_size), dim=1).values
        kth = largest.gather(1, (k - 1).clamp_(min=0).unsqueeze(1))
        remove = (logits < kth) & (k > 0).unsqueeze(1)
        return logits.masked_fill_(remove, float("-inf"))
