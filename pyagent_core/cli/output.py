"""Printing helpers shared by the commands: JSON, rich tables (or, on a narrow terminal or a pipe, blocks), errors."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Sequence
from typing import Any


def print_json(data: Any) -> None:
    """Print ``data`` as indented JSON on stdout."""
    sys.stdout.write(json.dumps(data, indent=2, default=str) + "\n")


def print_table(title: str, columns: Sequence[str], rows: Iterable[Sequence[Any]]) -> None:
    """Print a rich table; cells are converted with ``str`` and shown literally (``None`` prints as empty)."""
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    table = Table(title=title, title_justify="left")
    for column in columns:
        table.add_column(column, overflow="fold")
    for row in rows:
        table.add_row(*("" if cell is None else escape(str(cell)) for cell in row))  # text, not markup
    Console().print(table)


WIDE = 120
"""Columns from which a listing is a table; narrower (80 when piped), one block per row."""


def console_width() -> int:
    """The width listings are laid out for: the terminal's, ``$COLUMNS``, or 80 when piped."""
    from rich.console import Console

    return int(Console().width)


def print_blocks(title: str, blocks: Iterable[tuple[str, Sequence[str]]]) -> None:
    """Print ``title``, then each block: its heading, and its lines indented below it, wrapped to the console's
    width between words (a word longer than a line is not split)."""
    import textwrap

    width = max(console_width(), 40)
    out = [title]
    for heading, lines in blocks:
        out.extend(textwrap.wrap(heading, width, initial_indent="  ", subsequent_indent="    ",
                                 break_long_words=False, break_on_hyphens=False))
        for line in lines:
            out.extend(textwrap.wrap(line, width, initial_indent="      ", subsequent_indent="      ",
                                     break_long_words=False, break_on_hyphens=False))
    sys.stdout.write("\n".join(out) + "\n")


def error(message: str) -> None:
    """Print ``error: message`` on stderr (the caller decides whether to exit)."""
    sys.stderr.write(f"error: {message}\n")
