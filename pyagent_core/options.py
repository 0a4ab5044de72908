"""Typed backend options: the schema a spec declares and the validation of user-given values.

Values may arrive as Python objects (from code or a TOML table) or as strings (from ``--opt k=v``
or an environment variable); strings are converted to the declared type before range checks.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from pyagent_core.errors import OptionError

OPTION_TYPES: dict[str, type] = {"int": int, "float": float, "str": str, "bool": bool}
_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


def _type_name(value: type) -> str:
    for name, typ in OPTION_TYPES.items():
        if typ is value:
            return name
    raise OptionError(f"option type {value!r} is not supported; use one of: {', '.join(OPTION_TYPES)}")


@attrs.frozen(kw_only=True)
class OptionSpec:
    """One configurable option of a backend: its type, default, help text and allowed values."""

    type: type = attrs.field(validator=lambda _i, _a, v: _type_name(v))
    default: Any = None
    help: str = ""
    choices: tuple[Any, ...] = ()
    min: float | None = None
    max: float | None = None

    @property
    def type_name(self) -> str:
        """The type as written in docs and ``pyagent info``: int, float, str or bool."""
        return _type_name(self.type)

    def convert(self, key: str, value: Any, owner: str) -> Any:
        """Return ``value`` converted to this option's type, or raise :class:`OptionError`."""
        converted = _coerce(self.type, value)
        if converted is None:
            raise OptionError(
                f"option {key!r} of {owner} expects {self.type_name}, got {value!r}; "
                f"write e.g. {key}={self.default if self.default is not None else _example(self.type)}"
            )
        if self.choices and converted not in self.choices:
            raise OptionError(
                f"option {key!r} of {owner} must be one of {list(self.choices)}, got {converted!r}"
            )
        if self.min is not None and converted < self.min:
            raise OptionError(f"option {key!r} of {owner} must be >= {self.min}, got {converted!r}")
        if self.max is not None and converted > self.max:
            raise OptionError(f"option {key!r} of {owner} must be <= {self.max}, got {converted!r}")
        return converted


def _example(typ: type) -> str:
    return {int: "1", float: "0.5", str: "text", bool: "true"}[typ]


def _coerce(typ: type, value: Any) -> Any:
    """Convert ``value`` to ``typ``; ``None`` means it cannot be converted."""
    if typ is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.strip().lower() in _TRUE | _FALSE:
            return value.strip().lower() in _TRUE
        return None
    if isinstance(value, bool):  # bool is an int subclass: never accept it for numbers
        return None
    if typ is int:
        if isinstance(value, int):
            return value
        if isinstance(value, str):
            try:
                return int(value.strip(), 0)
            except ValueError:
                return None
        return None
    if typ is float:
        if isinstance(value, (int, float)):
            return float(value)
        if isinstance(value, str):
            try:
                return float(value.strip())
            except ValueError:
                return None
        return None
    return value if isinstance(value, str) else None


def to_option_spec(key: str, value: Any) -> OptionSpec:
    """Accept the shorthand ``{"k": int}`` as well as a full :class:`OptionSpec`."""
    if isinstance(value, OptionSpec):
        return value
    if isinstance(value, type):
        return OptionSpec(type=value)
    raise OptionError(
        f"option {key!r} must be declared as a type (int, float, str, bool) or an OptionSpec, "
        f"got {value!r}"
    )


def parse_assignments(pairs: list[str] | tuple[str, ...]) -> dict[str, str]:
    """Parse ``["k=v", ...]`` (CLI ``--opt``) into a dict of raw string values."""
    out: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise OptionError(f"option {pair!r} is not of the form KEY=VALUE; write e.g. block_size=32")
        out[key.strip()] = value.strip()
    return out


def validate_options(
    schema: Mapping[str, OptionSpec], values: Mapping[str, Any], owner: str
) -> dict[str, Any]:
    """Check ``values`` against ``schema`` and return every option with defaults filled in.

    Raises :class:`OptionError` for an unknown key (listing the valid ones) or a bad value.
    """
    unknown = sorted(set(values) - set(schema))
    if unknown:
        valid = ", ".join(sorted(schema)) or "(this backend takes no options)"
        raise OptionError(f"unknown option {unknown[0]!r} for {owner}; valid options: {valid}")
    result = {key: spec.default for key, spec in schema.items()}
    for key, value in values.items():
        result[key] = schema[key].convert(key, value, owner)
    return result
