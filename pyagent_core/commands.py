"""What a distribution that adds ``pyagent`` commands may use: options, printing, the command line itself.

A plugin adds commands through the ``pyagent_register_commands(app)`` hook (docs/hooks.md). Its
commands look and behave like the core's when they use the pieces here:

- option types: :data:`JsonFlag` (``--json``), and the parser options the core's ``parse``
  command takes (:data:`ToolsOpt`, :data:`ToolParserOpt`, :data:`ToolParserOptsOpt`,
  :data:`ReasoningOpt`, :data:`ReasoningOptsOpt`), with :func:`read_tools` for the ``--tools`` file;
- output: :func:`print_json`, :func:`print_table`, :func:`error` and :func:`show_message` (an
  assistant message for people);
- :func:`command_line`: the whole ``pyagent`` application with every installed distribution's
  commands, for tests (typer's ``CliRunner().invoke(command_line(), [...])``).

This module is public and versioned with the contract (``pyagent_core.CONTRACT_VERSION``); the
modules under ``pyagent_core.cli`` are the core's own commands and may change in any release.
Importing it loads neither torch nor any plugin.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Annotated, Any

import typer

from pyagent_core.errors import RequestError
from pyagent_core.text import read_utf8

JsonFlag = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]
"""``--json``: print JSON instead of a table."""
ToolsOpt = Annotated[Path | None, typer.Option("--tools", help="JSON file: a list of OpenAI tool definitions.")]
"""``--tools FILE``: the request's tools, read with :func:`read_tools`."""
ToolParserOpt = Annotated[str | None, typer.Option("--tool-parser", help="Tool-call parser, see pyagent list.")]
"""``--tool-parser NAME``: a tool-call parser backend."""
ReasoningOpt = Annotated[str | None, typer.Option("--reasoning-parser", help="Reasoning parser, if the model reasons.")]
"""``--reasoning-parser NAME``: a reasoning parser backend."""
ToolParserOptsOpt = Annotated[list[str] | None, typer.Option("--tool-parser-opt", help="Tool parser option KEY=VALUE.")]
"""``--tool-parser-opt KEY=VALUE`` (repeatable): options of the tool-call parser."""
ReasoningOptsOpt = Annotated[list[str] | None, typer.Option("--reasoning-parser-opt",
                                                            help="Reasoning parser option KEY=VALUE.")]
"""``--reasoning-parser-opt KEY=VALUE`` (repeatable): options of the reasoning parser."""


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


def read_tools(path: Path | None) -> list[dict[str, Any]]:
    """The tools in ``path`` (a JSON list, or an object with a ``tools`` list); none without a path.

    Raises :class:`~pyagent_core.errors.RequestError` for a file that cannot be read, is not UTF-8 (the
    message names the byte), is not JSON or holds no list.
    """
    if path is None:
        return []
    text = read_utf8(path, "tools")
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise RequestError(f"tools file {path} is not JSON ({exc}); write a list of tool definitions") from None
    tools = value.get("tools") if isinstance(value, dict) else value
    if not isinstance(tools, list):
        raise RequestError(f"tools file {path} must hold a JSON list of tool definitions (or {{\"tools\": [...]}})")
    return tools


def show_message(message: dict[str, Any]) -> None:
    """Print an OpenAI assistant message for people: reasoning, content, then a table of tool calls."""
    if message.get("reasoning_content"):
        typer.secho(f"[reasoning] {message['reasoning_content']}", dim=True)
    if message.get("content"):
        typer.echo(message["content"])
    calls = message.get("tool_calls") or []
    if calls:
        print_table("tool calls", ["id", "function", "arguments"],
                    [(c["id"], c["function"]["name"], c["function"]["arguments"]) for c in calls])


def command_line() -> typer.Typer:
    """The ``pyagent`` application with every installed distribution's commands added (once per process).

    A plugin whose ``pyagent_register_commands`` hook raises is reported on stderr; the other
    commands still work.
    """
    from pyagent_core.cli import full_app

    return full_app()
