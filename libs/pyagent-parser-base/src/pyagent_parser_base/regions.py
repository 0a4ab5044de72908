"""The declarative layer: a tool format is content with tool-call regions in it.

A :class:`Region` opens at a start marker, holds a body in one of the body formats, and closes at
an end marker (or where its body ends). :class:`ToolFormat` scans content for the start markers
(holding back text that could be the start of one), hands each region to its body, and recovers
from malformed regions: the failure is reported and reading resumes after the region. A region
that opens with an ordinary character (``[`` or ``{``, ``in_body``) is read again as plain
content when its body fails before any call started: such text was an answer, not a call.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import attrs

from pyagent_parser_base.emitter import Emitter
from pyagent_parser_base.source import (
    Malformed,
    ParseFailure,
    Source,
    Wait,
    accept,
    skip_space,
    starts_with,
    stream_until,
)

Body = Callable[[Source, Emitter], Wait[None]]
"""Reads what is inside a region, reporting calls to the emitter."""

Renderer = Callable[[Sequence[tuple[str, dict[str, Any]]]], str]
"""Writes calls ``(name, arguments)`` in a format, as the model would."""


def _discard(_text: str) -> None:
    """Drops text skipped while recovering from a malformed region."""


@attrs.frozen
class Region:
    """Where tool calls are written.

    Attributes:
        start: the marker that opens the region.
        body: reads the region's content.
        end: the marker that closes it; ``""`` when the body's own end closes it. A missing end
            marker at the very end of the text is accepted.
        at_start: the region may only open at the start of the message (after whitespace).
        in_body: the start marker is the body's first character (``[``, ``{``): it is not consumed.
    """

    start: str
    body: Body
    end: str = ""
    at_start: bool = False
    in_body: bool = False


@attrs.frozen
class ToolFormat:
    """A tool-call format: its regions and how to write calls in it.

    Attributes:
        regions: the regions calls may appear in.
        render: writes calls as the model does (round trips, benchmarks, constraints).
        trigger: what every call of the format starts with, for constraints (default: the
            first region's start marker).
    """

    regions: tuple[Region, ...]
    render: Renderer
    trigger: str = ""

    def program(self, src: Source, out: Emitter) -> Wait[None]:
        """Read a whole message: content, regions, recovery (see the module docstring)."""
        anywhere = tuple(r for r in self.regions if not r.at_start)
        region = yield from self._scan_start(src, out)
        while True:
            if region is None:
                region = yield from _scan(src, out, anywhere)
                if region is None:
                    return
            begin = src.pos - (0 if region.in_body else len(region.start))
            src.anchor = begin
            started = out.calls_started
            try:
                yield from region.body(src, out)
                if region.end and not (yield from accept(src, region.end)) and not src.at_end():
                    raise Malformed(f"expected {region.end!r} but found {src.snippet(src.pos, 20)!r}")
            except ParseFailure as failure:
                if region.in_body and out.calls_started == started:
                    src.pos, src.anchor = begin, None
                    yield from _as_content(src, out, region.start)
                    region = None
                    continue
                out.fail(f"{failure}; in {src.snippet(begin)!r}")
                yield from _recover(src, region, anywhere)
            src.anchor = None
            region = None

    def _scan_start(self, src: Source, out: Emitter) -> Wait[Region | None]:
        """The region opening the message, if one may and does."""
        first_regions = [r for r in self.regions if r.at_start]
        if not first_regions or (yield from skip_space(src)) is None:
            return None
        for region in first_regions:
            if (yield from starts_with(src, region.start)):
                if not region.in_body:
                    src.pos += len(region.start)
                return region
        return None


def _scan(src: Source, out: Emitter, regions: tuple[Region, ...]) -> Wait[Region | None]:
    """Stream content until a region opens (returned, its marker consumed unless ``in_body``)."""
    stop = yield from stream_until(src, tuple(r.start for r in regions), out.text)
    if stop is None:
        return None
    region = next(r for r in regions if r.start == stop)
    if region.in_body:
        src.pos -= len(stop)
    return region


def _as_content(src: Source, out: Emitter, marker: str) -> Wait[None]:
    """Emit ``marker`` (a first character that did not open a region after all) as content."""
    out.text(src.buf[src.pos:src.pos + len(marker)])
    src.pos += len(marker)
    yield from ()


def _recover(src: Source, region: Region, anywhere: tuple[Region, ...]) -> Wait[None]:
    """Skip the rest of a malformed region: to its end marker, else to the next region or the end."""
    if src.at_end():
        return
    if region.end:
        yield from stream_until(src, (region.end,), _discard)
        return
    stop = yield from stream_until(src, tuple(r.start for r in anywhere), _discard)
    if stop is not None:
        src.pos -= len(stop)


@attrs.frozen
class ProgramFormat:
    """A tool-call format whose reading is a program of its own (e.g. harmony), with its renderer.

    Attributes:
        reader: the program.
        render: writes calls as the model does.
        trigger: what every call starts with, for constraints.
    """

    reader: Callable[[Source, Emitter], Wait[None]]
    render: Renderer
    trigger: str = ""

    def program(self, src: Source, out: Emitter) -> Wait[None]:
        """Read a whole message."""
        yield from self.reader(src, out)
