"""Helpers the tests share: a reader fed in pieces through :class:`~pyagent_parser_base.machine.Run`, text cuts."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from pyagent_parser_base.emitter import Emitter, ToolSet
from pyagent_parser_base.machine import Run
from pyagent_parser_base.source import ParseFailure, Source, Wait, stream_until

Reader = Callable[[Source], Wait[Any]]

SETTINGS = settings(max_examples=150, deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.too_slow])
"""Reproducible hypothesis settings for these tests."""


def feed_reader(reader: Reader, pieces: Iterable[str], after: Callable[[], None] = lambda: None) -> dict[str, Any]:
    """Run ``reader`` over ``pieces``, then the end of the text, calling ``after`` after each piece.

    Returns ``{"value": what the reader returned, "rest": the text it left}``, or
    ``{"error": the ParseFailure it raised}``.
    """
    box: dict[str, Any] = {}

    def program(src: Source, _out: Emitter) -> Wait[None]:
        try:
            box["value"] = yield from reader(src)
        except ParseFailure as failure:
            box["error"] = failure
            return
        rest: list[str] = []
        yield from stream_until(src, (), rest.append)
        box["rest"] = "".join(rest)

    run = Run(program, Emitter(ToolSet(())))
    for piece in pieces:
        run.feed(piece)
        after()
    run.close()
    return box


def split(text: str, cuts: Iterable[int]) -> list[str]:
    """``text`` cut at the offsets ``cuts`` (repeated offsets give empty pieces)."""
    return [text[lo:hi] for lo, hi in itertools.pairwise([0, *sorted(cuts), len(text)])]


def cuts_of(data: st.DataObject, text: str) -> list[int]:
    """Hypothesis-chosen cut points inside ``text``."""
    return data.draw(st.lists(st.integers(0, len(text)), max_size=min(len(text), 10)), label="cuts")
