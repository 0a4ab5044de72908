"""Temperature scaling: divide each row's logits by the request's temperature."""

from __future__ import annotations

from typing import Any, ClassVar

import torch

from pyagent_core.interfaces.sampler import FusableMaskStep
from pyagent_sampler_base.common_params import TEMPERATURE
from pyagent_sampler_base.precision import working_dtype
from pyagent_sampler_base.request_params import RequestParam
from pyagent_sampler_base.row_param_processor import RowParamProcessor


class TemperatureProcessor(RowParamProcessor, FusableMaskStep):
    """Divides each row by its ``temperature``; rows with temperature 0 or 1 are left unchanged.

    Temperature 0 is the conventional "greedy" setting: this processor passes such rows through,
    and choosing the most likely token is the job of the greedy selector.
    """

    request_param: ClassVar[RequestParam] = TEMPERATURE
    neutral: ClassVar[Any] = 1.0
    # one step of the fused mask (FusableMaskStep): a host may run it with its neighbours as one kernel call
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
