"""The per-request parameters of the penalties processor and their checks."""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable
from typing import Any

import attrs


def _real(low: float, high: float | None, *, open_low: bool = False) -> Callable[[Any], bool]:
    def check(value: Any) -> bool:
        if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value):
            return False
        above = value > low if open_low else value >= low
        return above and (high is None or value <= high)
    return check


def _last_n(value: Any) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool) and value >= -1


@attrs.frozen
class PenaltyParam:
    """A parameter: its name, its value when unset anywhere, the check and the allowed values in words."""

    name: str
    neutral: Any
    is_valid: Callable[[Any], bool]
    allowed: str

    def validate(self, value: Any, where: str) -> None:
        """Raise ``ValueError`` naming ``where`` unless ``value`` is ``None`` or valid."""
        if value is not None and not self.is_valid(value):
            raise ValueError(f"{where}: {self.name}={value!r} is invalid; {self.name} must be {self.allowed}")


REPETITION = PenaltyParam("repetition_penalty", 1.0, _real(0.0, None, open_low=True),
                          "a finite number > 0 (1 turns it off)")
FREQUENCY = PenaltyParam("frequency_penalty", 0.0, _real(-2.0, 2.0), "a number in [-2, 2] (0 turns it off)")
PRESENCE = PenaltyParam("presence_penalty", 0.0, _real(-2.0, 2.0), "a number in [-2, 2] (0 turns it off)")
LAST_N = PenaltyParam("penalty_last_n", -1, _last_n,
                      "an integer >= -1 (-1: the whole context, 0: penalties off, N: the last N tokens)")
PARAMS = (REPETITION, FREQUENCY, PRESENCE, LAST_N)
