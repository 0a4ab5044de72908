"""What ``pyagent chat`` needs from the terminal: a line editor for its turns, and Ctrl-C that stops a reply.

On a terminal the turns are read through GNU readline (the standard ``readline`` module): lines are
edited in raw mode, so they are not cut at the terminal's 4095-character line limit, and earlier
turns come back with the arrow keys. From a pipe, lines are read as they are. Ctrl-C while typing
drops the line; Ctrl-C during a reply stops the reply (the session and its history stay).
"""

from __future__ import annotations

import io
import signal
import sys
from types import FrameType, TracebackType


class LineEditor:
    """Reads one turn at a time: ``read()`` returns the line, or ``None`` at end of input.

    Args:
        interactive: stdin is a terminal: use readline and show ``prompt``.
        prompt: the prompt shown before each turn on a terminal.
    """

    def __init__(self, interactive: bool, prompt: str = "> ") -> None:
        self.interactive = interactive
        self.prompt = prompt if interactive else ""
        if isinstance(sys.stdin, io.TextIOWrapper):  # a byte that is not UTF-8 arrives as a surrogate escape,
            sys.stdin.reconfigure(errors="surrogateescape")  # for the caller to name, not as an exception
        if interactive:
            try:
                import readline  # noqa: F401  (importing it makes input() a line editor)
            except ImportError:  # Python built without readline (Windows): input() as is
                pass

    def read(self) -> str | None:
        """The next line (without its newline; bytes that are not UTF-8 as surrogate escapes, see
        :func:`pyagent_core.text.text_problem`); ``None`` at end of input (Ctrl-D)."""
        while True:
            try:
                return input(self.prompt)
            except EOFError:
                return None
            except KeyboardInterrupt:  # Ctrl-C while typing drops the line
                sys.stdout.write("\n")
                if not self.interactive:
                    return None


class StopOnInterrupt:
    """Within ``with``, Ctrl-C (SIGINT) sets :attr:`requested` instead of raising, so the engine is never
    interrupted mid-step; the reply loop checks it between outputs and stops the reply."""

    def __init__(self) -> None:
        self.requested = False
        self._previous: object = None

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        self.requested = True

    def __enter__(self) -> StopOnInterrupt:
        self._previous = signal.signal(signal.SIGINT, self._handle)
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 traceback: TracebackType | None) -> None:
        signal.signal(signal.SIGINT, self._previous)  # type: ignore[arg-type]
