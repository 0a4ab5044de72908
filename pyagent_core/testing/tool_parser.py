"""Conformance kit for tool-call parsers: fixtures, streaming equivalence, odd input.

The checks themselves live in :mod:`pyagent_core.testing.streaming`; this module adds the fixture
type, the tool definitions handed to the parser and the tool-call specific checks (ids, errors).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, ClassVar

import attrs

from pyagent_core.interfaces.tool_parser import ExtractedToolCalls, StreamingParser, ToolParser
from pyagent_core.testing.streaming import Message, StreamingParserConformance
from pyagent_core.types import ToolParserSpec


def _calls(values: Iterable[tuple[str, Any]]) -> tuple[tuple[str, Any], ...]:
    return tuple((name, arguments) for name, arguments in values)


@attrs.frozen
class ToolParserCase:
    """A model output and what the parser must find in it.

    Attributes:
        text: the raw generated text.
        content: the expected content (``None`` or ``""`` for none).
        calls: the expected calls as ``(name, arguments)``, arguments as a decoded JSON value.
        errors: how many malformed calls ``extract`` must report; cases with errors are not
            required to stream identically.
    """

    text: str
    content: str | None = None
    calls: tuple[tuple[str, Any], ...] = attrs.field(default=(), converter=_calls)
    errors: int = 0


def _function(name: str, properties: Mapping[str, Any]) -> dict[str, Any]:
    return {"type": "function", "function": {
        "name": name, "parameters": {"type": "object", "properties": dict(properties)}}}


KIT_TOOLS = (
    _function("get_weather", {"city": {"type": "string"}, "unit": {"type": "string"}}),
    _function("add", {"a": {"type": "number"}, "b": {"type": "number"}}),
)
"""Tool definitions passed to the parser unless a kit subclass sets ``tools``."""


class ToolParserConformance(StreamingParserConformance):
    """Kit for :class:`ToolParser` s. Set ``impl``, ``spec`` and ``cases`` (:class:`ToolParserCase`)."""

    kind = "tool_parser"
    spec: ClassVar[ToolParserSpec]
    cases: ClassVar[Sequence[ToolParserCase]] = ()
    tools: ClassVar[Sequence[Mapping[str, Any]]] = KIT_TOOLS

    def make_parser(self) -> ToolParser:
        """Construct the parser under test with ``tools``."""
        parser: ToolParser = self.impl(list(self.tools), self.make_options())
        return parser

    def extract(self, parser: StreamingParser, text: str) -> ExtractedToolCalls:
        """``parser.extract(text)``, checked for type, unique call ids and ``type == "function"``."""
        assert isinstance(parser, ToolParser)
        result = parser.extract(text)
        assert isinstance(result, ExtractedToolCalls), f"extract({text!r}) returned {result!r}"
        ids = [call.id for call in result.tool_calls]
        assert all(isinstance(i, str) and i for i in ids) and len(set(ids)) == len(ids), (
            f"extract({text!r}) gave tool call ids {ids}; they must be unique, non-empty strings"
        )
        assert all(call.type == "function" for call in result.tool_calls), f"extract({text!r}): bad call type"
        return result

    def extracted(self, parser: StreamingParser, text: str) -> Message:
        result = self.extract(parser, text)
        return Message(result.content or "", "", tuple((c.name, c.arguments) for c in result.tool_calls))

    def expected(self, case: ToolParserCase) -> Message:
        return Message(case.content or "", "", case.calls)

    def streamable(self, case: ToolParserCase) -> bool:
        return case.errors == 0

    def test_errors_are_reported(self) -> None:
        for case in self.cases:
            errors = self.extract(self.make_parser(), case.text).errors
            assert len(errors) == case.errors and all(isinstance(e, str) and e for e in errors), (
                f"extract({case.text!r}) reported errors {list(errors)}, expected {case.errors} messages"
            )
