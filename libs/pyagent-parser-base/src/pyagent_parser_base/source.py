"""Text that arrives in pieces, and the suspending readers every format is written with.

A format is a generator function over a :class:`Source`. The readers below are generators too:
when the text they need has not arrived they ``yield``, and the driver resumes them after the next
delta. A format therefore reads like an ordinary recursive-descent parser, and it decides only on
text it already has, so it makes the same decisions however the text was split. Once the source is
``final``, a reader that still lacks text raises :class:`Truncated` (or reports the end where the
end is legal).

Readers keep no absolute offsets across a ``yield``: the driver drops consumed text between
deltas (:meth:`Source.compact`), which shifts every offset but leaves offsets relative to
``pos`` intact.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Generator
from typing import TypeVar

T = TypeVar("T")
Wait = Generator[None, None, T]
"""A reader: a generator that suspends until enough text is there, then returns its result."""

_SPACE = re.compile(r"\s*")
_COMPACT_AT = 8192


class ParseFailure(Exception):
    """The text is not what the format expects here (subclasses say why)."""


class Truncated(ParseFailure):
    """The text ended inside a construct."""


class Malformed(ParseFailure):
    """The text cannot continue the construct being read."""


class Source:
    """The text of one stream: what has arrived (``buf``), the read position, and whether more will come.

    ``anchor`` marks text a format may read again (the start of a region that can turn out to be
    plain content); :meth:`compact` keeps it.
    """

    def __init__(self) -> None:
        self.buf = ""
        self.pos = 0
        self.final = False
        self.anchor: int | None = None

    def feed(self, text: str) -> None:
        """Append the next piece of text."""
        self.buf += text

    def compact(self) -> None:
        """Drop text that was read and is not anchored, once there is enough of it to matter."""
        keep = self.pos if self.anchor is None else min(self.pos, self.anchor)
        if keep >= _COMPACT_AT:
            self.buf = self.buf[keep:]
            self.pos -= keep
            if self.anchor is not None:
                self.anchor -= keep

    def snippet(self, start: int, size: int = 80) -> str:
        """Up to ``size`` characters from offset ``start``, for error messages."""
        text = self.buf[start:start + size]
        return text + ("..." if len(self.buf) > start + size else "")

    def at_end(self) -> bool:
        """Whether everything was read and no more text will come."""
        return self.final and self.pos >= len(self.buf)


def more(src: Source) -> Wait[bool]:
    """Suspend until more text arrives; ``False`` (at once) when no more will."""
    size = len(src.buf)
    while len(src.buf) == size:
        if src.final:
            return False
        yield
    return True


def skip_space(src: Source) -> Wait[str | None]:
    """Skip whitespace; return the next character, or ``None`` at the end of the text."""
    while True:
        match = _SPACE.match(src.buf, src.pos)
        assert match is not None
        src.pos = match.end()
        if src.pos < len(src.buf):
            return src.buf[src.pos]
        if not (yield from more(src)):
            return None


def starts_with(src: Source, literal: str) -> Wait[bool]:
    """Whether the text at the read position starts with ``literal`` (waits until that is decided)."""
    while True:
        have = src.buf[src.pos:src.pos + len(literal)]
        if not literal.startswith(have):
            return False
        if len(have) == len(literal):
            return True
        if not (yield from more(src)):
            return False


def accept(src: Source, literal: str) -> Wait[bool]:
    """Consume ``literal`` (after whitespace) if it comes next; whether it did."""
    yield from skip_space(src)
    if (yield from starts_with(src, literal)):
        src.pos += len(literal)
        return True
    return False


def expect(src: Source, literal: str, what: str) -> Wait[None]:
    """Consume ``literal`` (after whitespace) or fail: :class:`Truncated` at the end, else :class:`Malformed`."""
    if not (yield from accept(src, literal)):
        rest = src.buf[src.pos:]
        if src.final and literal.startswith(rest):
            raise Truncated(f"the text ends where {literal!r} ({what}) should follow")
        raise Malformed(f"expected {literal!r} ({what}) but found {src.snippet(src.pos, 20)!r}")


@functools.lru_cache(maxsize=256)
def _stops(stops: tuple[str, ...]) -> tuple[re.Pattern[str], frozenset[str], int]:
    """A pattern finding the earliest stop (the longest on ties), the stops' proper prefixes, the longest stop."""
    ordered = sorted({s for s in stops if s}, key=len, reverse=True)
    pattern = re.compile("|".join(map(re.escape, ordered))) if ordered else re.compile(r"(?!)")
    prefixes = frozenset(s[:k] for s in ordered for k in range(1, len(s)))
    return pattern, prefixes, max(map(len, ordered), default=0)


def held_back(text: str, start: int, stops: tuple[str, ...]) -> int:
    """How many characters at the end of ``text[start:]`` could be the start of a stop."""
    _, prefixes, longest = _stops(stops)
    for size in range(min(longest - 1, len(text) - start), 0, -1):
        if text[len(text) - size:] in prefixes:
            return size
    return 0


def _decided(src: Source, found: re.Match[str], stops: tuple[str, ...]) -> bool:
    """Whether ``found``, the earliest complete stop in the text so far, stays the earliest and longest.

    More text cannot change it once the text is final, or when no stop that more text could
    complete starts at or before it (with the stops ``<a`` and ``<a>``, the text ``x<a`` decides
    nothing yet).
    """
    return src.final or len(src.buf) - held_back(src.buf, src.pos, stops) > found.start()


def stream_until(src: Source, stops: tuple[str, ...], emit: Callable[[str], None]) -> Wait[str | None]:
    """Pass text to ``emit`` as it arrives until the earliest of ``stops``; consume that stop and return it.

    Text that could be the start of a stop is held back until it is decided. At the end of the
    text everything left is emitted and ``None`` returned.
    """
    pattern = _stops(stops)[0]
    while True:
        found = pattern.search(src.buf, src.pos)
        if found and _decided(src, found, stops):
            if found.start() > src.pos:
                emit(src.buf[src.pos:found.start()])
            src.pos = found.end()
            return found.group()
        safe = len(src.buf) - held_back(src.buf, src.pos, stops)
        if safe > src.pos:
            emit(src.buf[src.pos:safe])
            src.pos = safe
        if not (yield from more(src)) and not found:
            if src.pos < len(src.buf):
                emit(src.buf[src.pos:])
                src.pos = len(src.buf)
            return None


def read_until(src: Source, stops: tuple[str, ...], what: str, consume: bool = True) -> Wait[tuple[str, str]]:
    """The text up to the earliest of ``stops`` and that stop (consumed unless ``consume`` is false).

    Raises :class:`Truncated` when the text ends first.
    """
    pattern = _stops(stops)[0]
    searched = 0  # characters after pos already known to start no stop
    while True:
        found = pattern.search(src.buf, src.pos + searched)
        if found and _decided(src, found, stops):
            text = src.buf[src.pos:found.start()]
            src.pos = found.end() if consume else found.start()
            return text, found.group()
        searched = len(src.buf) - held_back(src.buf, src.pos, stops) - src.pos
        if not (yield from more(src)) and not found:
            raise Truncated(f"the text ends inside {what} (no {' or '.join(map(repr, stops))} follows)")


def read_match(src: Source, pattern: re.Pattern[str], what: str) -> Wait[str]:
    """Consume the longest match of ``pattern`` at the read position (waits until the match cannot grow)."""
    yield from skip_space(src)
    while True:
        found = pattern.match(src.buf, src.pos)
        if found and (found.end() < len(src.buf) or src.final):
            src.pos = found.end()
            return found.group()
        if not found and src.pos < len(src.buf):
            raise Malformed(f"expected {what} but found {src.snippet(src.pos, 20)!r}")
        if not (yield from more(src)):
            if found:
                src.pos = found.end()
                return found.group()
            raise Truncated(f"the text ends where {what} should follow")
