"""What a request asks of structured output: one constraint, the backend to compile it, fallback or not."""

from __future__ import annotations

import attrs

from pyagent_core.errors import RequestError
from pyagent_core.interfaces.grammar import ConstraintSpec

AUTO = "auto"
"""The backend name that walks the fallback order instead of naming one backend."""


def _check_backend(_instance: object, _attribute: object, value: object) -> None:
    if not isinstance(value, str) or not value.strip():
        raise RequestError(f"grammar backend must be a backend name or 'auto', got {value!r}")


@attrs.frozen(kw_only=True)
class StructuredOutputParams:
    """A request's structured-output settings.

    Attributes:
        constraint: what the output must match (exactly one constraint kind, see :class:`ConstraintSpec`).
        backend: a grammar backend name (``dist:name`` works too), or ``"auto"`` to walk the
            engine's fallback order.
        fallback: with ``"auto"``, go on to the next backend when one refuses the constraint;
            ``False`` tries only the first backend of the order. A named backend never falls back.
    """

    constraint: ConstraintSpec = attrs.field(validator=attrs.validators.instance_of(ConstraintSpec))
    backend: str = attrs.field(default=AUTO, validator=_check_backend)
    fallback: bool = True
