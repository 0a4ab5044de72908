"""Driving a format program over a stream, and the streaming half of a parser built on one.

A *program* is a generator function ``program(source, emitter)`` that reads the whole message with
the suspending readers of :mod:`~pyagent_parser_base.source`. :class:`Run` feeds it text
and resumes it; extraction is one run fed the whole text at once, streaming is one run fed delta
by delta, so both go through the same code.
"""

from __future__ import annotations

from collections.abc import Callable, Generator

from pyagent_core.interfaces.tool_parser import DeltaMessage
from pyagent_parser_base.emitter import Emitter
from pyagent_parser_base.source import Source

Program = Callable[[Source, Emitter], Generator[None, None, None]]
"""A format: reads a message from a :class:`Source`, reporting to an :class:`Emitter`."""


class Run:
    """One message going through ``program``."""

    def __init__(self, program: Program, emitter: Emitter) -> None:
        self.source = Source()
        self.emitter = emitter
        self.fed = 0
        self._steps = program(self.source, emitter)
        self._done = False
        self._resume()

    def feed(self, text: str) -> None:
        """The next piece of the message."""
        if self._done or not text:
            return
        self.source.feed(text)
        self.fed += len(text)
        self._resume()
        self.source.compact()

    def close(self) -> None:
        """The message is complete: the program reads to the end."""
        self.source.final = True
        self._resume()
        if not self._done:
            raise RuntimeError("a parser program waited for text after the end of the message")

    def _resume(self) -> None:
        if self._done:
            return
        try:
            next(self._steps)
        except StopIteration:
            self._done = True


class Streaming:
    """The streaming methods of a parser built on a program (mixed into the parser classes).

    Subclasses provide :meth:`new_run`. ``extract_delta`` starts a new stream by itself when
    ``previous_text`` is empty after text was fed.
    """

    _run: Run | None = None

    def new_run(self) -> Run:
        """A fresh run of this parser's program."""
        raise NotImplementedError

    def run_whole(self, text: str) -> Run:
        """A run fed all of ``text`` and closed."""
        run = self.new_run()
        run.feed(text)
        run.close()
        return run

    def extract_delta(self, previous_text: str, delta_text: str) -> DeltaMessage | None:
        """What ``delta_text`` adds (see :class:`~pyagent_core.interfaces.tool_parser.StreamingParser`)."""
        if self._run is None or (not previous_text and self._run.fed):
            self._run = self.new_run()
        self._run.feed(delta_text)
        return self._run.emitter.take_delta()

    def finish(self, text: str) -> DeltaMessage | None:
        """End of the stream: read what ``text`` holds beyond what was fed, release everything held."""
        run = self._run or self.new_run()
        self._run = None
        run.feed(text[run.fed:])
        run.close()
        return run.emitter.take_delta()

    def reset(self) -> None:
        """Forget the current stream."""
        self._run = None
