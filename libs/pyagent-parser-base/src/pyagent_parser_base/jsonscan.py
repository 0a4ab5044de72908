"""Incremental JSON readers: strings, containers (streamed as written), skipped values, call objects.

:func:`json_container` passes the model's own text of an object to the emitter as it arrives and
stops at the matching close bracket, tracking only strings, escapes and bracket nesting. The
extracted arguments are the same characters, so streaming and extraction agree by construction;
the emitter checks the text is JSON as it arrives (:mod:`~pyagent_parser_base.jsonprefix`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

from pyagent_parser_base.emitter import Emitter
from pyagent_parser_base.source import (
    Malformed,
    Source,
    Truncated,
    Wait,
    accept,
    more,
    read_match,
    skip_space,
)

_STRING_SPECIAL = re.compile(r'["\\]')
# Outside strings: brackets and quotes matter; anything JSON never has there is an error.
_STRUCTURE = re.compile(r'["{}\[\]]|[^\s:,0-9A-Za-z+.\-]')
_CLOSERS = {"{": "}", "[": "]"}
_SCALAR = re.compile(r"[-+.\w]+")


def _no_op(_text: str) -> None:
    """Discards text (a value read only to be skipped)."""


def json_string(src: Source, what: str) -> Wait[str]:
    """Read a JSON string token and return its decoded value."""
    first = yield from skip_space(src)
    if first is None:
        raise Truncated(f"the text ends where {what} (a JSON string) should follow")
    if first != '"':
        raise Malformed(f"expected {what} as a JSON string but found {src.snippet(src.pos, 20)!r}")
    scanned = 1
    while True:
        found = _STRING_SPECIAL.search(src.buf, src.pos + scanned)
        if found and found.group() == '"':
            token = src.buf[src.pos:found.end()]
            src.pos = found.end()
            try:
                value: str = json.loads(token)
            except ValueError as error:
                raise Malformed(f"{what} {token!r} is not a valid JSON string ({error})") from None
            return value
        if found and found.end() < len(src.buf):
            scanned = found.end() + 1 - src.pos  # a backslash and the character it escapes
            continue
        scanned = (found.start() if found else len(src.buf)) - src.pos
        if not (yield from more(src)):
            raise Truncated(f"the text ends inside {what} (an unterminated JSON string)")


def json_container(src: Source, emit: Callable[[str], None], what: str) -> Wait[None]:
    """Pass one JSON object or array, verbatim, to ``emit`` as it arrives, up to its matching close."""
    first = yield from skip_space(src)
    if first is None:
        raise Truncated(f"the text ends where {what} should follow")
    if first not in _CLOSERS:
        raise Malformed(f"expected {what} as a JSON object but found {src.snippet(src.pos, 20)!r}")
    open_brackets: list[str] = []
    in_string = False
    while True:
        at = src.pos
        while at < len(src.buf):
            if in_string:
                found = _STRING_SPECIAL.search(src.buf, at)
                if found is None:
                    at = len(src.buf)
                elif found.group() == '"':
                    in_string, at = False, found.end()
                elif found.end() < len(src.buf):
                    at = found.end() + 1
                else:
                    at = found.start()  # a backslash whose escaped character has not arrived
                    break
                continue
            found = _STRUCTURE.search(src.buf, at)
            if found is None:
                at = len(src.buf)
                continue
            char, at = found.group(), found.end()
            if char == '"':
                in_string = True
            elif char in _CLOSERS:
                open_brackets.append(char)
            elif char in "}]" and open_brackets and _CLOSERS[open_brackets[-1]] == char:
                open_brackets.pop()
                if not open_brackets:
                    emit(src.buf[src.pos:at])
                    src.pos = at
                    return
            else:
                emit(src.buf[src.pos:found.start()])
                src.pos = found.start()
                raise Malformed(f"unexpected {char!r} inside {what}")
        if at > src.pos:
            emit(src.buf[src.pos:at])
            src.pos = at
        if not (yield from more(src)):
            raise Truncated(f"the text ends inside {what} (an unclosed JSON {'string' if in_string else 'value'})")


def json_skip(src: Source, what: str) -> Wait[None]:
    """Read past one JSON value of any type."""
    first = yield from skip_space(src)
    if first == '"':
        yield from json_string(src, what)
    elif first in _CLOSERS:
        yield from json_container(src, _no_op, what)
    else:
        yield from read_match(src, _SCALAR, what)


def json_arguments(src: Source, out: Emitter) -> Wait[None]:
    """Stream a call's arguments: a JSON object, or a JSON string holding one (decoded first)."""
    first = yield from skip_space(src)
    if first == '"':
        text = yield from json_string(src, "the arguments")
        out.args(text)
    else:
        yield from json_container(src, out.args, "the arguments")


NAME_KEYS = ("name",)
ARGUMENT_KEYS = ("arguments", "parameters")


def call_object(src: Source, out: Emitter) -> Wait[None]:
    """One ``{"name": ..., "arguments"|"parameters": {...}}`` object: a tool call, in any key order.

    The call starts once its name is read; arguments that come before the name are held until then.
    Other keys are skipped; missing arguments are ``{}``.
    """
    yield from _expect_char(src, "{", "a tool call object")
    name: str | None = None
    held: list[str] = []
    has_arguments = False
    first = True
    while not (yield from accept(src, "}")):
        if not first:
            yield from _expect_char(src, ",", "',' between the keys of a tool call")
        first = False
        key = yield from json_string(src, "a key of the tool call object")
        yield from _expect_char(src, ":", "':' after a key")
        if key in NAME_KEYS and name is None:
            value = yield from json_string(src, "the tool's name")
            name = value
            out.start_call(name)
            for piece in held:
                out.args(piece)
        elif key in ARGUMENT_KEYS and not has_arguments:
            has_arguments = True
            if name is None:
                yield from _arguments_into(src, held.append)
            else:
                yield from json_arguments(src, out)
        else:
            yield from json_skip(src, f"the value of {key!r}")
    if name is None:
        raise Malformed("a tool call object without a \"name\"")
    if not has_arguments:
        out.args("{}")
    out.end_call()


def _arguments_into(src: Source, emit: Callable[[str], None]) -> Wait[None]:
    first = yield from skip_space(src)
    if first == '"':
        emit((yield from json_string(src, "the arguments")))
    else:
        yield from json_container(src, emit, "the arguments")


def _expect_char(src: Source, char: str, what: str) -> Wait[None]:
    found = yield from skip_space(src)
    if found == char:
        src.pos += 1
        return
    if found is None:
        raise Truncated(f"the text ends where {what} should follow")
    raise Malformed(f"expected {what} but found {src.snippet(src.pos, 20)!r}")


def call_list(src: Source, out: Emitter) -> Wait[None]:
    """A JSON array of tool call objects."""
    yield from _expect_char(src, "[", "a list of tool calls")
    if (yield from accept(src, "]")):
        return
    while True:
        yield from call_object(src, out)
        if (yield from accept(src, "]")):
            return
        yield from _expect_char(src, ",", "',' or ']' after a tool call")


def call_object_or_list(src: Source, out: Emitter) -> Wait[None]:
    """A tool call object, or a list of them."""
    first = yield from skip_space(src)
    if first == "[":
        yield from call_list(src, out)
    else:
        yield from call_object(src, out)


def call_sequence(separator: str) -> Callable[[Source, Emitter], Wait[None]]:
    """Tool call objects one after another, optionally separated by ``separator``; ends before other text."""

    def body(src: Source, out: Emitter) -> Wait[None]:
        yield from call_object(src, out)
        while True:
            if (yield from accept(src, separator)):
                yield from call_object(src, out)
            elif (yield from skip_space(src)) == "{":
                yield from call_object(src, out)
            else:
                return

    return body


def dumps(value: Any) -> str:
    """JSON text as the renderers write it: ``", "`` and ``": "`` separators, non-ASCII kept."""
    return json.dumps(value, ensure_ascii=False)
