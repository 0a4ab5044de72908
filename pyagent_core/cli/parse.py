"""``pyagent parse``: run tool-call and reasoning parsers on a model's output.

Reads the raw text from stdin (or ``--input``) and prints the OpenAI assistant message. Calls that
were malformed, unknown or invalid for their tool's schema are reported on stderr, and the command
then exits with status 1.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from pyagent_core.commands import (
    ReasoningOpt,
    ReasoningOptsOpt,
    ToolParserOpt,
    ToolParserOptsOpt,
    ToolsOpt,
    error,
    print_json,
    read_tools,
    show_message,
)
from pyagent_core.errors import RequestError
from pyagent_core.options import parse_assignments
from pyagent_core.text import decode_utf8


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


def register(app: typer.Typer) -> None:
    """Add ``parse`` to ``app``."""
    app.command("parse")(parse)
