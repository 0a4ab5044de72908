"""Temperature scaling: divide each row's logits by the request's temperature."""

from __future__ import annotations

from typing import Any, ClassVar

import torch

from pyagent_samplers_reference.precision import working_dtype
from pyagent_samplers_reference.request_params import RequestParam
from pyagent_samplers_reference.row_param_processor import RowParamProcessor


class TemperatureProcessor(RowParamProcessor):
    """Divides each row by its ``temperature``; rows with temperature 0 or 1 are left unchanged.

    Temperature 0 is the conventional "greedy" setting: this processor passes such rows through,
    and choosing the most likely token is the job of the greedy selector.
    """

    request_param: ClassVar[RequestParam] = RequestParam(
        name="temperature",
        integer=False,
        min=0.0,
        allowed="a finite number >= 0 (0 and 1 leave the logits unchanged)",
    )
    neutral: ClassVar[Any] = 1.0
    # the engine may fuse this step with its neighbours into one C kernel call (engine/fused_mask.py)
    mask_step: ClassVar[str] = "temperature"

    def is_argmax_invariant(self) -> bool:
        """True: dividing by a positive temperature keeps the order of the logits."""
        return True

    def is_neutral(self, value: Any) -> bool:
        """Temperatures 0 and 1 leave a row unchanged."""
        return value in (0, 1)

    def process(self, logits: torch.Tensor, values: list[Any]) -> torch.Tensor:
        """Divide every row by its temperature (1 for rows left unchanged), in place."""
        divisors = torch.tensor(
            [1.0 if self.is_neutral(value) else float(value) for value in values],
            dtype=working_dtype(logits),
            device=logits.device,
        )
        return logits.div_(divisors.unsqueeze(1))
