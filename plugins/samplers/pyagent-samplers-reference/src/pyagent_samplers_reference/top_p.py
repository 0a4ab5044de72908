"""Top-p (nucleus) filtering with the semantics of transformers' ``TopPLogitsWarper``."""

from __future__ import annotations

from typing import Any, ClassVar

import torch

from pyagent_core.interfaces.sampler import FusableMaskStep
from pyagent_sampler_base.precision import working_dtype
from pyagent_sampler_base.request_params import RequestParam
from pyagent_sampler_base.row_param_processor import RowParamProcessor


class TopPProcessor(RowParamProcessor, FusableMaskStep):
    """Keeps each row's smallest set of most probable tokens whose probability sums to ``top_p``.

    As in ``TopPLogitsWarper`` with ``min_tokens_to_keep=1``: with the row sorted by ascending
    logit, a token is removed when the cumulative softmax up to and including it is ``<= 1 - top_p``,
    and the most probable token is always kept (so ``top_p=0`` keeps exactly one token). Equal logits
    are ordered by token id, the lower id counting as more probable. ``top_p=1`` turns it off.
    """

    request_param: ClassVar[RequestParam] = RequestParam(
        name="top_p",
        integer=False,
        min=0.0,
        max=1.0,
        allowed="a number in [0, 1] (1 turns top-p off, 0 keeps only the most likely token)",
    )
    neutral: ClassVar[Any] = 1.0
    # one step of the fused mask (FusableMaskStep): a host may run it with its neighbours as one kernel call
    mask_step: ClassVar[str] = "top_p"

    def is_argmax_invariant(self) -> bool:
        """True: the most probable token is always kept."""
        return True

    def is_neutral(self, value: Any) -> bool:
        """``top_p >= 1`` keeps every token."""
        return bool(value >= 1)

    def process(self, logits: torch.Tensor, values: list[Any]) -> torch.Tensor:
        """Mask the tokens outside each row's nucleus, in place, with one sort over the batch."""
        # 1 - p is computed in double precision like the warper's threshold; rows left alone get -1,
        # which no cumulative probability reaches.
        thresholds = torch.tensor(
            [-1.0 if self.is_neutral(p) else 1.0 - p for p in values],
            dtype=working_dtype(logits),
            device=logits.device,
        )
        # A stable descending sort puts lower ids first among equal logits; flipped, it is the
        # ascending order in which the most probable token (lowest id among ties) comes last.
        descending, order = logits.sort(dim=1, descending=True, stable=True)
        ascending, order = descending.flip(1), order.flip(1)
        cumulative = ascending.to(thresholds.dtype).softmax(dim=1).cumsum(dim=1)
        remove_sorted = cumulative <= thresholds.unsqueeze(1)
        remove_sorted[:, -1] = False
        remove = torch.empty_like(remove_sorted).scatter_(1, order, remove_sorted)
        return logits.masked_fill_(remove, float("-inf"))
