"""Pythonic calls (Llama 3.2 / Llama 4): ``[get_weather(city="Paris"), add(a=1, b=2)]``.

Each call's keyword arguments are read up to the matching ``)`` (quotes, escapes and nested
brackets tracked), evaluated as Python literals with :mod:`ast` (never executed) and emitted, with
the call's name, as one JSON object. A call whose arguments are not literals with a JSON
equivalent (``b'z'``, ``1e999``, a positional argument) is reported; the calls around it are kept.
"""

from __future__ import annotations

import ast
import functools
import json
import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

from pyagent_parser_base.emitter import Emitter
from pyagent_parser_base.source import Malformed, Source, Truncated, Wait, accept, expect, more, read_match

_NAME = re.compile(r"[A-Za-z_][\w.\-]*")
_SPECIAL = re.compile(r"""["'()\[\]{}\\]""")
_CLOSERS = {"(": ")", "[": "]", "{": "}"}
_JSON_NAMES = {"true": True, "false": False, "null": None}


def python_list(src: Source, out: Emitter) -> Wait[None]:
    """A Python list of calls."""
    yield from expect(src, "[", "a list of calls")
    if (yield from accept(src, "]")):
        return
    while True:
        name = yield from read_match(src, _NAME, "a function name")
        yield from expect(src, "(", f"the arguments of {name}")
        out.start_call(name)
        text = yield from _until_close(src)
        try:
            arguments = keyword_arguments(text)
        except Malformed as failure:
            out.fail(str(failure))  # this call only: the list goes on
        else:
            out.args(json.dumps(arguments, ensure_ascii=False))
            out.end_call()
        if (yield from accept(src, "]")):
            return
        yield from expect(src, ",", "',' or ']' after a call")


def _until_close(src: Source) -> Wait[str]:
    """The text up to the ``)`` closing the call (consumed); strings and brackets are skipped over."""
    pieces: list[str] = []
    stack = ["("]
    quote = ""
    while True:
        at = src.pos
        while at < len(src.buf):
            if quote:
                found = _quote_end(quote).search(src.buf, at)
                if found is None:
                    at = len(src.buf)
                elif found.group() != "\\":
                    quote, at = "", found.end()
                elif found.end() < len(src.buf):
                    at = found.end() + 1
                else:
                    at = found.start()
                    break
                continue
            found = _SPECIAL.search(src.buf, at)
            if found is None:
                at = len(src.buf)
                continue
            char = found.group()
            if char in "\"'":
                if len(src.buf) - found.start() < 3 and not src.final:
                    at = found.start()  # could open a triple-quoted string: wait for two more characters
                    break
                triple = src.buf[found.start():found.start() + 3]
                quote = triple if triple == char * 3 else char
                at = found.start() + len(quote)
            elif char in _CLOSERS:
                stack.append(char)
                at = found.end()
            elif char in ")]}":
                if _CLOSERS[stack.pop()] != char:
                    raise Malformed(f"unbalanced {char!r} in the arguments")
                at = found.end()
                if not stack:
                    pieces.append(src.buf[src.pos:at - 1])
                    src.pos = at
                    return "".join(pieces)
            else:
                at = found.end()
        pieces.append(src.buf[src.pos:at])
        src.pos = at
        if not (yield from more(src)):
            raise Truncated("the text ends inside a call's arguments")


@functools.lru_cache(maxsize=4)
def _quote_end(quote: str) -> re.Pattern[str]:
    return re.compile(r"\\|" + re.escape(quote))


def keyword_arguments(text: str) -> dict[str, Any]:
    """The keyword arguments written in ``text`` (between a call's parentheses) as JSON-ready values."""
    try:
        call = ast.parse(f"f({text})", mode="eval").body
    except (SyntaxError, ValueError, RecursionError, MemoryError) as error:
        raise Malformed(f"the arguments {text!r} are not Python syntax ({error})") from None
    if not isinstance(call, ast.Call) or call.args or any(k.arg is None for k in call.keywords):
        raise Malformed(f"the arguments {text!r} must be keyword arguments only (name=value)")
    return {keyword.arg: _literal(keyword.value) for keyword in call.keywords if keyword.arg is not None}


def _literal(node: ast.expr) -> Any:
    if isinstance(node, ast.Name) and node.id in _JSON_NAMES:
        return _JSON_NAMES[node.id]
    if isinstance(node, (ast.List, ast.Tuple)):
        return [_literal(item) for item in node.elts]
    if isinstance(node, ast.Dict):
        keys = [_literal(k) if k is not None else None for k in node.keys]
        if not all(isinstance(k, str) for k in keys):
            raise Malformed("dictionary keys in arguments must be strings")
        return dict(zip(keys, (_literal(v) for v in node.values), strict=True))
    try:
        value = ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        raise Malformed(f"{ast.unparse(node)!r} is not a literal value") from None
    if isinstance(value, float) and not math.isfinite(value):
        raise Malformed(f"{ast.unparse(node)!r} is not a finite number")
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    raise Malformed(f"{ast.unparse(node)!r} has no JSON equivalent")


def python_literal(value: Any) -> str:
    """``value`` (decoded JSON) written as a Python literal."""
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{python_literal(k)}: {python_literal(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(map(python_literal, value)) + "]"
    return repr(value)


def render_python_list(calls: Sequence[tuple[str, Mapping[str, Any]]]) -> str:
    """Calls written as a Python list."""
    written = (f"{name}({', '.join(f'{k}={python_literal(v)}' for k, v in arguments.items())})"
               for name, arguments in calls)
    return "[" + ", ".join(written) + "]"
