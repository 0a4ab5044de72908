"""Printing helpers shared by the commands: JSON, rich tables, errors."""

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


def error(message: str) -> None:
    """Print ``error: message`` on stderr (the caller decides whether to exit)."""
    sys.stderr.write(f"error: {message}\n")
