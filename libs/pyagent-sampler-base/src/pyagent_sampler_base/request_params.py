"""Per-request sampling parameters: their type, allowed range, and the check that rejects bad values."""

from __future__ import annotations

import math
import numbers
from typing import Any

import attrs


@attrs.frozen(kw_only=True)
class RequestParam:
    """A sampling parameter that each request may set (``top_k``, ``seed``...).

    Attributes:
        name: the key in a request's ``params`` and in the sampler's options.
        integer: True for integer parameters, False for real numbers (which must be finite).
        min: the smallest allowed value.
        max: the largest allowed value (``None``: unbounded).
        allowed: what an allowed value is, in words, for error messages.
    """

    name: str
    integer: bool
    min: float
    max: float | None = None
    allowed: str

    def is_valid(self, value: Any) -> bool:
        """True when ``value`` has the right type and lies in ``[min, max]``."""
        if isinstance(value, bool):
            return False
        if self.integer:
            if not isinstance(value, numbers.Integral):
                return False
        elif not isinstance(value, numbers.Real) or not math.isfinite(value):
            return False
        return value >= self.min and (self.max is None or value <= self.max)

    def validate(self, value: Any, where: str) -> None:
        """Raise ``ValueError`` naming ``where`` the value came from unless it is ``None`` or valid."""
        if value is not None and not self.is_valid(value):
            raise ValueError(
                f"{where}: {self.name}={value!r} is invalid; {self.name} must be {self.allowed}"
            )
