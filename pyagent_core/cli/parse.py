"""``pyagent parse``: run tool-call and reasoning parsers on a model's output.

Reads the raw text from stdin (or ``--input``) and prints the OpenAI assistant message. Calls that
were malformed, unknown or invalid for their tool's schema are reported on stderr, and the command
then exits with status 1.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from pyagent_core.cli.output import error, print_json, print_table
from pyagent_core.errors import RequestError
from pyagent_core.options import parse_assignments
from pyagent_core.text import decode_utf8, read_utf8

ToolsOpt = Annotated[Path | None, typer.Option("--tools", help="JSON file: a list of OpenAI tool definitions.")]
ToolParserOpt = Annotated[str | None, typer.Option("--tool-parser", help="Tool-call parser, see pyagent list.")]
ReasoningOpt = Annotated[str | None, typer.Option("--reasoning-parser", help="Reasoning parser, if the model reasons.")]
ToolParserOptsOpt = Annotated[list[str] | None, typer.Option("--tool-parser-opt", help="Tool parser option KEY=VALUE.")]
ReasoningOptsOpt = Annotated[list[str] | None, typer.Option("--reasoning-parser-opt",
                                                            help="Reasoning parser option KEY=VALUE.")]


def read_tools(path: Path | None) -> list[dict[str, Any]]:
    """The tools in ``path`` (a JSON list, or an object with a ``tools`` list); none without a path."""
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


def read_output(path: Path | None) -> str:
    """The model output to parse: ``path``'s text, or stdin's; UTF-8 (a byte-order mark is dropped).

    Raises :class:`RequestError` for a file that cannot be read or bytes that are not UTF-8.
    """
    where = str(path) if path else "stdin"
    try:
        data = path.read_bytes() if path else sys.stdin.buffer.read()
    except OSError as exc:
        raise RequestError(f"cannot read {where}: {exc.strerror}") from None
    return decode_utf8(data, where)


def parse(
    tool_parser: ToolParserOpt = None,
    reasoning_parser: ReasoningOpt = None,
    tools: ToolsOpt = None,
    tool_parser_opt: ToolParserOptsOpt = None,
    reasoning_parser_opt: ReasoningOptsOpt = None,
    input_file: Annotated[Path | None, typer.Option("--input", help="Read the output from a file, not stdin.")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print the OpenAI assistant message as JSON.")] = False,
) -> None:
    """Parse a model's raw output (stdin) into content, reasoning and tool calls."""
    from pyagent_core.parsing import build_message_parser

    if not tool_parser and not reasoning_parser:
        raise RequestError("give --tool-parser NAME and/or --reasoning-parser NAME (see `pyagent list tool_parser`)")
    parser = build_message_parser(
        tool_parser, reasoning_parser, tools=read_tools(tools),
        tool_options=parse_assignments(tool_parser_opt or []),
        reasoning_options=parse_assignments(reasoning_parser_opt or []),
    )
    message = parser.parse(read_output(input_file))
    if json_out:
        print_json(message.to_openai())
    else:
        show_message(message.to_openai())
    for problem in message.errors:
        error(problem)
    if message.errors:
        raise typer.Exit(1)


def show_message(message: dict[str, Any]) -> None:
    """Print an assistant message for people: reasoning, content, then a table of tool calls."""
    if message.get("reasoning_content"):
        typer.secho(f"[reasoning] {message['reasoning_content']}", dim=True)
    if message.get("content"):
        typer.echo(message["content"])
    calls = message.get("tool_calls") or []
    if calls:
        print_table("tool calls", ["id", "function", "arguments"],
                    [(c["id"], c["function"]["name"], c["function"]["arguments"]) for c in calls])


def register(app: typer.Typer) -> None:
    """Add ``parse`` to ``app``."""
    app.command("parse")(parse)
