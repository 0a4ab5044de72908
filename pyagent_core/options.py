"""Typed backend options: the schema a spec declares and the validation of user-given values.

Values may arrive as Python objects (from code or a TOML table) or as strings (from ``--opt k=v``
or an environment variable); strings are converted to the declared type before range checks.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from pyagent_core.errors import OptionError

OPTION_TYPES: dict[str, Any] = {
    "int": int, "float": float, "str": str, "bool": bool,
    "list[int]": list[int], "list[list[int]]": list[list[int]], "dict[int, float]": dict[int, float],
    "list[str]": list[str],
}
"""The types an option may declare, by the name docs and ``pyagent info`` write. The four lists and
mappings hold token ids (``list[int]``), token id sequences (``list[list[int]]``), token biases
(``dict[int, float]``) and strings (``list[str]``)."""

_SCALARS = (int, float, str, bool)
_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}
_EXAMPLES: dict[str, str] = {
    "int": "1", "float": "0.5", "str": "text", "bool": "true", "list[int]": "1,2,3",
    "list[list[int]]": "12,7;3", "dict[int, float]": "15=-5,42=2.5", "list[str]": "text",
}
_CLI_FORMS: dict[str, str] = {
    "list[int]": "comma-separated token ids such as 1,2,3",
    "list[list[int]]": "one token id sequence such as 12,7 per flag",
    "dict[int, float]": "one TOKEN_ID=BIAS such as 15=-5 per flag",
    "list[str]": "one string per flag (escapes such as \\n are read; 'none' alone: no strings)",
}
NONE_TEXT = "none"
"""Given alone to a ``list[str]`` flag, the empty list (``--dry-sequence-breakers none``)."""


def _type_name(value: Any) -> str:
    for name, typ in OPTION_TYPES.items():
        if typ == value:
            return name
    raise OptionError(f"option type {value!r} is not supported; use one of: {', '.join(OPTION_TYPES)}")


@attrs.frozen(kw_only=True)
class OptionSpec:
    """One configurable option of a backend: its type, default, help text and allowed values.

    Attributes:
        type: one of :data:`OPTION_TYPES` (``int``, ``float``, ``str``, ``bool``, ``list[int]``...).
        default: the value when nothing sets it.
        help: what the option does, for ``pyagent info`` and the docs.
        choices: the allowed values (empty: any of the type).
        min, max: the bounds of a number.
        request: the option is also a per-request parameter of the same name (samplers: a request's
            value overrides the option for that request). Hosts offer it without knowing the backend:
            the engine as a ``pyagent generate`` flag (``typical_p`` is ``--typical-p``), a request
            field of ``pyagent serve`` and ``SamplingParams(extra=...)``. The backend checks a request's
            value itself, when the request joins (see the sampler contract).
        request_help: what the per-request parameter does, in one sentence for ``--help`` and the
            server's schema (default: ``help``).
    """

    type: Any = attrs.field(validator=lambda _i, _a, v: _type_name(v))
    default: Any = None
    help: str = ""
    choices: tuple[Any, ...] = ()
    min: float | None = None
    max: float | None = None
    request: bool = False
    request_help: str = ""

    def __attrs_post_init__(self) -> None:
        if (self.min is not None or self.max is not None) and self.type not in (int, float):
            raise OptionError(f"an option of type {self.type_name} has no bounds; min and max are for int and float")

    @property
    def type_name(self) -> str:
        """The type as written in docs and ``pyagent info``: int, float, str, bool, list[int]..."""
        return _type_name(self.type)

    @property
    def parameter_help(self) -> str:
        """The help of the per-request parameter: ``request_help``, else ``help``."""
        return self.request_help or self.help

    @property
    def scalar(self) -> bool:
        """Whether the type is int, float, str or bool (a flag takes one value as it is)."""
        return self.type in _SCALARS

    @property
    def repeatable(self) -> bool:
        """Whether a command-line flag of this type is given once per item (sequences, biases,
        strings); a ``list[int]`` is one comma-separated value, like the scalars."""
        return self.type_name in ("list[list[int]]", "dict[int, float]", "list[str]")

    @property
    def cli_form(self) -> str:
        """How a command line writes a value of this type (empty for the scalars)."""
        return _CLI_FORMS.get(self.type_name, "")

    def convert(self, key: str, value: Any, owner: str) -> Any:
        """Return ``value`` converted to this option's type, or raise :class:`OptionError`."""
        converted = _coerce(self.type_name, value)
        if converted is None:
            example = self.default if self.scalar and self.default is not None else _EXAMPLES[self.type_name]
            raise OptionError(f"option {key!r} of {owner} expects {self.type_name}, got {value!r}; "
                              f"write e.g. {key}={example}")
        if self.choices and converted not in self.choices:
            raise OptionError(
                f"option {key!r} of {owner} must be one of {list(self.choices)}, got {converted!r}"
            )
        if self.min is not None and converted < self.min:
            raise OptionError(f"option {key!r} of {owner} must be >= {self.min}, got {converted!r}")
        if self.max is not None and converted > self.max:
            raise OptionError(f"option {key!r} of {owner} must be <= {self.max}, got {converted!r}")
        return converted

    def from_cli(self, flag: str, texts: Sequence[str]) -> Any:
        """The value of a command-line flag of this type, from its texts (one per occurrence).

        Scalars take one text; ``list[int]`` one text of comma-separated ids; the repeatable types
        one item per text (see :attr:`cli_form`). Only the type is checked here: a sampler checks a
        request's value itself. Raises :class:`OptionError` naming ``flag`` and the expected form.
        """
        name = self.type_name
        if not self.repeatable:
            if len(texts) != 1:
                raise OptionError(f"{flag} takes one value, got {len(texts)}: {list(texts)!r}")
            converted = _coerce(name, texts[0])
        elif name == "list[str]":
            converted = _strings(flag, texts)
        elif name == "list[list[int]]":
            converted = [_token_ids(text) for text in texts]
            converted = None if None in converted else converted
        else:
            converted = _biases(",".join(texts))
        if converted is None:
            form = self.cli_form or f"a value of type {name}"
            raise OptionError(f"{flag} takes {form}; got {' '.join(map(repr, texts))}")
        return converted


def _token_ids(text: str) -> list[int] | None:
    """``"1,2, 3"`` -> ``[1, 2, 3]``; None when a part is not an integer."""
    try:
        return [int(part) for part in text.replace(" ", ",").split(",") if part.strip()]
    except ValueError:
        return None


def _biases(text: str) -> dict[int, float] | None:
    """``"15=-5,42=2.5"`` -> ``{15: -5.0, 42: 2.5}``; None when malformed."""
    out = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        token, sep, bias = part.partition("=")
        if not sep:
            return None
        try:
            out[int(token)] = float(bias)
        except ValueError:
            return None
    return out


_ESCAPES = {"n": "\n", "r": "\r", "t": "\t", "\\": "\\", "'": "'", '"': '"'}


def unescape(text: str) -> str:
    r"""``\n``, ``\r``, ``\t``, ``\\``, ``\'``, ``\"`` and ``\xHH`` as the characters they stand for
    (as llama.cpp reads its string flags); any other backslash stays as written."""
    out, i = [], 0
    while i < len(text):
        char, following = text[i], text[i + 1:i + 2]
        if char == "\\" and following in _ESCAPES:
            out.append(_ESCAPES[following])
            i += 2
        elif char == "\\" and following == "x" and _is_hex(text[i + 2:i + 4]):
            out.append(chr(int(text[i + 2:i + 4], 16)))
            i += 4
        else:
            out.append(char)
            i += 1
    return "".join(out)


def _is_hex(digits: str) -> bool:
    return len(digits) == 2 and all(d in "0123456789abcdefABCDEF" for d in digits)


def _strings(flag: str, texts: Sequence[str]) -> list[str]:
    """The strings of a ``list[str]`` flag with their escapes read; ``none`` alone is no strings."""
    if list(texts) == [NONE_TEXT]:
        return []
    strings = [unescape(text) for text in texts]
    if "" in strings or NONE_TEXT in texts:
        raise OptionError(f"{flag} takes non-empty strings, or '{NONE_TEXT}' alone for an empty list; "
                          f"got {list(texts)!r}")
    return strings


def _coerce(name: str, value: Any) -> Any:
    """Convert ``value`` to the type named ``name``; ``None`` means it cannot be converted."""
    if name == "bool":
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.strip().lower() in _TRUE | _FALSE:
            return value.strip().lower() in _TRUE
        return None
    if isinstance(value, bool):  # bool is an int subclass: never accept it for numbers
        return None
    if name == "int":
        if isinstance(value, int):
            return value
        if isinstance(value, str):
            try:
                return int(value.strip(), 0)
            except ValueError:
                return None
        return None
    if name == "float":
        if isinstance(value, (int, float)):
            return float(value)
        if isinstance(value, str):
            try:
                return float(value.strip())
            except ValueError:
                return None
        return None
    if name == "str":
        return value if isinstance(value, str) else None
    return _coerce_container(name, value)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _coerce_container(name: str, value: Any) -> Any:
    """The containers of :data:`OPTION_TYPES`, from their text form or from Python values."""
    if name == "list[int]":
        if isinstance(value, str):
            return _token_ids(value)
        ok = isinstance(value, (list, tuple)) and all(map(_is_int, value))
        return list(value) if ok else None
    if name == "list[list[int]]":
        if isinstance(value, str):
            sequences = [_token_ids(part) for part in value.split(";") if part.strip()]
            return None if None in sequences else sequences
        ok = isinstance(value, (list, tuple)) and all(
            isinstance(seq, (list, tuple)) and all(map(_is_int, seq)) for seq in value)
        return [list(seq) for seq in value] if ok else None
    if name == "dict[int, float]":
        if isinstance(value, str):
            return _biases(value)
        if not isinstance(value, Mapping) or not all(
                isinstance(token, int | str) and not isinstance(token, bool) and isinstance(bias, int | float)
                and not isinstance(bias, bool) for token, bias in value.items()):
            return None
        try:
            return {int(token): float(bias) for token, bias in value.items()}
        except ValueError:
            return None
    if isinstance(value, str):  # list[str]: one string is a list of one
        return [value]
    ok = isinstance(value, (list, tuple)) and all(isinstance(item, str) for item in value)
    return list(value) if ok else None


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
