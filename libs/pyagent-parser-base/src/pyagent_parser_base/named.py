"""Calls written from a template: markers around a name, then JSON arguments, then more markers.

One template string both parses and renders a call, e.g. DeepSeek-V3.1's
``"<｜tool▁call▁begin｜>{name}<｜tool▁sep｜>{args}<｜tool▁call▁end｜>"``. When reading, the literal
parts are matched token by token, any whitespace allowed where the template has whitespace; the
name runs up to the next literal; the arguments are streamed as written.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any

import attrs

from pyagent_parser_base.emitter import Emitter
from pyagent_parser_base.jsonscan import dumps, json_arguments
from pyagent_parser_base.source import (
    Malformed,
    ParseFailure,
    Source,
    Wait,
    expect,
    read_until,
    skip_space,
    starts_with,
    stream_until,
)

NameParser = Callable[[str], tuple[str, str | None]]
"""Turns the text in the name slot into ``(name, call id or None)``."""

NameWriter = Callable[[str, int], str]
"""Writes the name slot for call ``index`` of a message."""


def plain_name(text: str) -> tuple[str, str | None]:
    """The name slot holds just the name."""
    return text, None


def plain_writer(name: str, _index: int) -> str:
    """Writes just the name."""
    return name


def _tokens(literal: str) -> tuple[str, ...]:
    return tuple(literal.split())


@attrs.frozen
class NamedCall:
    """A call format given by a template with ``{name}`` and ``{args}`` slots (see the module docstring).

    Attributes:
        template: the call as written, ``{name}`` before ``{args}``.
        parse_name: reads the name slot (e.g. Kimi-K2's ``functions.NAME:INDEX``).
        write_name: writes the name slot.
    """

    template: str
    parse_name: NameParser = plain_name
    write_name: NameWriter = plain_writer

    @property
    def _parts(self) -> tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]:
        head, rest = self.template.split("{name}")
        middle, tail = rest.split("{args}")
        return _tokens(head), _tokens(middle), _tokens(tail)

    @property
    def closer(self) -> str:
        """The last literal of a call (where a call that cannot be read is skipped to); ``""`` if none."""
        tail = self._parts[2]
        return tail[-1] if tail else ""

    @property
    def opener(self) -> str:
        """The first literal of a call (what a repeated call starts with); ``""`` if the name comes first."""
        head = self._parts[0]
        return head[0] if head else ""

    def body(self, src: Source, out: Emitter) -> Wait[None]:
        """Read one call."""
        head, middle, tail = self._parts
        for token in head:
            yield from expect(src, token, "the start of a tool call")
        yield from skip_space(src)
        stops = middle[:1] or ("{",)
        raw, _ = yield from read_until(src, stops, "the tool's name", consume=False)
        name, call_id = self.parse_name(raw.strip())
        if not name or re.search(r"\s", name):
            raise Malformed(f"{raw.strip()!r} is not a tool name")
        for token in middle:
            yield from expect(src, token, "what follows the tool's name")
        out.start_call(name, call_id)
        yield from json_arguments(src, out)
        for token in tail:
            yield from expect(src, token, "the end of a tool call")
        out.end_call()

    def render(self, calls: Sequence[tuple[str, dict[str, Any]]], separator: str = "") -> str:
        """The calls written with the template, joined by ``separator``."""
        return separator.join(
            self.template.replace("{name}", self.write_name(name, index)).replace("{args}", dumps(arguments))
            for index, (name, arguments) in enumerate(calls)
        )


def _discard(_text: str) -> None:
    """Drops the rest of a call that could not be read."""


def repeated(item: Callable[[Source, Emitter], Wait[None]], opener: str, closer: str = "",
             until: str = "") -> Callable[[Source, Emitter], Wait[None]]:
    """A body of any number of ``item`` s, each starting with ``opener``.

    With ``until`` (the marker ending the region), one call that cannot be read does not cost the
    others: it is reported, and reading resumes after its ``closer`` or at the next ``opener``,
    whichever comes first, never past ``until``. Without it, the failure ends the region.
    """

    def body(src: Source, out: Emitter) -> Wait[None]:
        while (yield from skip_space(src)) is not None and (yield from starts_with(src, opener)):
            begin = src.pos
            try:
                yield from item(src, out)
            except ParseFailure as failure:
                if not until or src.at_end():
                    raise
                out.fail(f"{failure}; in {src.snippet(begin)!r}")
                src.pos = max(src.pos, begin + len(opener))
                stop = yield from stream_until(src, tuple(s for s in (closer, opener, until) if s), _discard)
                if stop is not None and stop != closer:
                    src.pos -= len(stop)

    return body
