"""Dynamic temperature: a temperature between ``T - range`` and ``T + range`` set by the row's entropy."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import torch

from pyagent_sampler_base.common_params import TEMPERATURE
from pyagent_sampler_base.multi_param import MultiParamProcessor, ParamCheck
from pyagent_sampler_base.precision import working_dtype
from pyagent_samplers_truncation.params import DYNATEMP_EXPONENT, DYNATEMP_RANGE


class DynamicTemperatureProcessor(MultiParamProcessor):
    """llama.cpp's entropy-scaled temperature (``--dynatemp-range``, ``--dynatemp-exp``).

    For a row with base ``temperature`` T > 0 and ``dynatemp_range`` r > 0, over its n finite
    logits: ``H`` is the entropy of their softmax, ``h = H / log(n)``, and the dynamic temperature is
    ``max(0, T - r) + (T + r - max(0, T - r)) * h ** dynatemp_exponent``. The row is multiplied by
    ``T / T_dyn``, so that the ``temperature`` sampler after it (which divides by T) leaves the row
    divided by ``T_dyn``: place ``dynatemp`` right before ``temperature`` in the chain (the default
    order does). A dynamic temperature of 0 keeps only the largest logits. Rows with one finite
    logit, with T = 0 (greedy) or r = 0 are left unchanged.
    """

    request_params: ClassVar[tuple[ParamCheck, ...]] = (
        DYNATEMP_RANGE, DYNATEMP_EXPONENT, TEMPERATURE,
    )
    neutral: ClassVar[Mapping[str, Any]] = {"dynatemp_range": 0.0, "dynatemp_exponent": 1.0, "temperature": 1.0}
    label: ClassVar[str] = "dynatemp sampler"

    def is_argmax_invariant(self) -> bool:
        """True: scaling by a positive factor, or keeping only the largest logits, keeps the argmax."""
        return True

    def is_active(self, values: Mapping[str, Any]) -> bool:
        """Rows with a positive range and a positive base temperature."""
        return bool(values["dynatemp_range"] > 0 and values["temperature"] > 0)

    def process(self, logits: torch.Tensor, rows: list[int]) -> torch.Tensor:
        """Rescale each row by ``T / T_dyn``."""
        scores = logits.to(working_dtype(logits))
        temperature = self.dynamic_temperature(scores, rows)
        base = self.row_tensor(rows, "temperature", scores)
        finite = torch.isfinite(scores)
        largest = scores.max(dim=1, keepdim=True).values
        greedy = torch.where(finite & (scores == largest), scores, float("-inf"))
        scaled = scores * (base / temperature.clamp(min=torch.finfo(scores.dtype).tiny))
        single = finite.sum(dim=1, keepdim=True) <= 1
        return torch.where(single, scores, torch.where(temperature > 0, scaled, greedy))

    def dynamic_temperature(self, scores: torch.Tensor, rows: list[int]) -> torch.Tensor:
        """The ``[rows, 1]`` dynamic temperature of each row (meaningful for rows with 2+ finite logits)."""
        probs = scores.softmax(dim=-1)
        entropy = -torch.where(probs > 0, probs * probs.log(), 0.0).sum(dim=1, keepdim=True)
        count = torch.isfinite(scores).sum(dim=1, keepdim=True).to(scores.dtype)
        normalized = entropy / count.clamp(min=2).log()
        base = self.row_tensor(rows, "temperature", scores)
        spread = self.row_tensor(rows, "dynatemp_range", scores)
        low = (base - spread).clamp(min=0)
        high = base + spread
        return low + (high - low) * normalized.pow(self.row_tensor(rows, "dynatemp_exponent", scores))

    def row_tensor(self, rows: list[int], name: str, like: torch.Tensor) -> torch.Tensor:
        """The ``[rows, 1]`` values of parameter ``name``."""
        values = [float(self.rows[r].values[name]) for r in rows]
        return torch.tensor(values, dtype=like.dtype, device=like.device).unsqueeze(1)
