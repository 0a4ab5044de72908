"""Min-p filtering: keep tokens whose probability is at least min_p times the top probability."""

from __future__ import annotations

import math
from typing import Any, ClassVar

import torch

from pyagent_core.interfaces.sampler import FusableMaskStep
from pyagent_sampler_base.request_params import RequestParam
from pyagent_sampler_base.row_param_processor import RowParamProcessor


class MinPProcessor(RowParamProcessor, FusableMaskStep):
    """Sets to ``-inf`` every token with ``prob < min_p * max_prob``; ``min_p=0`` turns it off.

    The test is ``logit - max_logit >= log(min_p)`` in double precision (the softmax's common
    denominator cancels), so it is exact up to the logits' own rounding and matches the fused C
    kernel bit for bit (min_p is rounded to float32 as the kernel takes it); ``min_p=1`` keeps the
    tokens tied with the maximum.
    """

    request_param: ClassVar[RequestParam] = RequestParam(
        name="min_p",
        integer=False,
        min=0.0,
        max=1.0,
        allowed="a number in [0, 1] (0 turns min-p off, 1 keeps only the most likely tokens)",
    )
    neutral: ClassVar[Any] = 0.0
    # one step of the fused mask (FusableMaskStep): a host may run it with its neighbours as one kernel call
    mask_step: ClassVar[str] = "min_p"

    def is_argmax_invariant(self) -> bool:
        """True: the most likely token always passes its own threshold."""
        return True

    def process(self, logits: torch.Tensor, values: list[Any]) -> torch.Tensor:
        """Mask each row below ``max + log(min_p)``, in place; rows of only ``-inf`` stay as they are."""
        # min_p is rounded to float32 first, as the fused kernel takes it
        as_float32 = torch.tensor(values, dtype=torch.float32).tolist()
        log_min_p = torch.tensor(
            [math.log(q) if q > 0 else -math.inf for q in as_float32], dtype=torch.float64, device=logits.device
        )
        row_max = logits.amax(dim=1, keepdim=True).double()
        remove = (logits.double() - row_max) < log_min_p.unsqueeze(1)
        remove &= torch.isfinite(row_max)
        return logits.masked_fill_(remove, float("-inf"))
