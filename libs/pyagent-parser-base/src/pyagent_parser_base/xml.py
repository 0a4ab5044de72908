"""XML-ish calls: a name tag, then one tag per parameter whose text is the value.

Qwen3-Coder (``<function=NAME><parameter=KEY>VALUE</parameter></function>``), GLM-4.5
(``NAME<arg_key>KEY</arg_key><arg_value>VALUE</arg_value>``) and MiniMax-M2
(``<invoke name="NAME"><parameter name="KEY">VALUE</parameter></invoke>``) differ only in their
tags, so one :class:`XmlCall` reads and writes all three. Values are text; the tool's JSON schema
says what type each one is (:func:`typed_value`). The arguments are streamed as the JSON text
``{"key": value, ...}``: a value that is text (:func:`keeps_text`) as it arrives, inside a JSON
string; any other value once its closing tag has arrived, since its type depends on all of it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from pyagent_parser_base.emitter import Emitter
from pyagent_parser_base.jsonscan import dumps
from pyagent_parser_base.source import (
    Malformed,
    Source,
    Truncated,
    Wait,
    accept,
    expect,
    read_until,
    skip_space,
    starts_with,
    stream_until,
)

_JSON_TYPES: dict[str, tuple[type, ...]] = {
    "integer": (int,), "number": (int, float), "boolean": (bool,), "object": (dict,), "array": (list,),
    "null": (type(None),),
}


def schema_types(schema: Mapping[str, Any] | None) -> set[str]:
    """The JSON types a schema allows (``type``, ``enum`` values, ``anyOf``/``oneOf``); empty: unknown."""
    if not isinstance(schema, Mapping):
        return set()
    declared = schema.get("type")
    types = {declared} if isinstance(declared, str) else {t for t in declared or () if isinstance(t, str)}
    for value in schema.get("enum") or ():
        types.add(next((name for name, kinds in _JSON_TYPES.items() if type(value) in kinds and not (
            name in ("integer", "number") and isinstance(value, bool))), "string"))
    for key in ("anyOf", "oneOf"):
        for choice in schema.get(key) or ():
            types |= schema_types(choice)
    return types


def keeps_text(schema: Mapping[str, Any] | None) -> bool:
    """Whether a parameter with this schema is its text as it is (only strings, or nothing, are allowed)."""
    types = schema_types(schema)
    return not types or types == {"string"}


def typed_value(text: str, schema: Mapping[str, Any] | None) -> Any:
    """A parameter's text as the value its schema asks for.

    Only-string schemas and parameters without a schema keep the text. Otherwise the text is read
    as JSON (``True``/``False``/``None`` spelled the Python way too); a result of an allowed type is
    used, else the text itself when strings are allowed, else the JSON value as read.
    """
    if keeps_text(schema):
        return text
    types = schema_types(schema)
    stripped = text.strip()
    try:
        value = json.loads({"True": "true", "False": "false", "None": "null"}.get(stripped, stripped))
    except ValueError:
        return text
    allowed = any(isinstance(value, _JSON_TYPES.get(t, ())) and not (isinstance(value, bool) and t in (
        "integer", "number")) for t in types)
    if allowed or "string" not in types:
        return value
    return text


def _trim_newline(text: str) -> str:
    """Drop one newline after the opening and before the closing tag (values sit on their own lines)."""
    text = text[1:] if text.startswith("\n") else text
    return text[:-1] if text.endswith("\n") else text


def _unquote(text: str) -> str:
    text = text.strip()
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "\"'":
        return text[1:-1]
    return text


@attrs.frozen
class XmlCall:
    """One XML-ish call format.

    Attributes:
        open: the text before the name (``""``: the name comes first).
        name_stops: where the name ends (not consumed).
        name_close: the literal after the name (``""``: none).
        param_open: the text before a parameter's key.
        key_close: the literals between a key and its value.
        value_close: the literal after a value.
        close: the literal ending the call (``""``: the region's end does).
        render_name: how a name is written between ``open`` and ``name_close``, ``{}`` for the name.
        layout: ``"lines"``: values sit on lines of their own (one newline after the opening and before
            the closing tag is not part of the value); ``"inline"``: values are exactly the tag's text.
    """

    open: str
    name_stops: tuple[str, ...]
    name_close: str
    param_open: str
    key_close: tuple[str, ...]
    value_close: str
    close: str
    render_name: str = "{}"
    layout: str = "lines"

    def body(self, src: Source, out: Emitter) -> Wait[None]:
        """Read one call, streaming its parameters as JSON."""
        if self.open:
            yield from expect(src, self.open, "the start of a call")
        raw, _ = yield from read_until(src, self.name_stops, "the tool's name", consume=False)
        name = _unquote(raw)
        if not name:
            raise Malformed(f"a call without a tool name ({raw!r})")
        if self.name_close:
            yield from expect(src, self.name_close, "the end of the tool's name")
        out.start_call(name)
        count = 0
        while True:
            if (yield from skip_space(src)) is None:
                break
            if (yield from starts_with(src, self.param_open)):
                src.pos += len(self.param_open)
                key_raw, _ = yield from read_until(src, self.key_close[:1], "a parameter's name", consume=False)
                for literal in self.key_close:
                    yield from expect(src, literal, "what follows a parameter's name")
                key = _unquote(key_raw)
                out.args(("{" if count == 0 else ", ") + f"{dumps(key)}: ")
                schema = out.tools.property_schema(name, key)
                if keeps_text(schema):
                    yield from self._stream_text(src, out)
                else:
                    text, _ = yield from read_until(src, (self.value_close,), "a parameter's value")
                    out.args(dumps(typed_value(_trim_newline(text) if self.layout == "lines" else text, schema)))
                count += 1
            elif self.close and (yield from accept(src, self.close)):
                break
            elif self.close:
                found = src.snippet(src.pos, 20)
                raise Malformed(f"expected {self.param_open!r} or {self.close!r} but found {found!r}")
            else:
                break
        out.args("}" if count else "{}")
        out.end_call()

    def _stream_text(self, src: Source, out: Emitter) -> Wait[None]:
        """Stream a text value as a JSON string while it arrives, up to and including ``value_close``."""
        stops: tuple[str, ...] = (self.value_close,)
        if self.layout == "lines":
            if (yield from starts_with(src, "\n")):
                src.pos += 1
            stops = ("\n" + self.value_close, self.value_close)
        out.args('"')
        if (yield from stream_until(src, stops, lambda piece: out.args(dumps(piece)[1:-1]))) is None:
            raise Truncated(f"the text ends inside a parameter's value (no {self.value_close!r} follows)")
        out.args('"')

    def render(self, name: str, arguments: Mapping[str, Any]) -> str:
        """One call written in this format (string values as they are, others as JSON)."""
        nl = "\n" if self.layout == "lines" else ""
        parts = [self.open + self.render_name.format(name) + self.name_close + "\n"]
        for key, value in arguments.items():
            text = value if isinstance(value, str) else dumps(value)
            parts.append(f"{self.param_open}{self.render_name.format(key)}{''.join(self.key_close)}{nl}{text}{nl}"
                         f"{self.value_close}\n")
        parts.append(self.close)
        return "".join(parts)

    def render_all(self, calls: Sequence[tuple[str, Mapping[str, Any]]]) -> list[str]:
        """Each call written in this format."""
        return [self.render(name, arguments) for name, arguments in calls]
