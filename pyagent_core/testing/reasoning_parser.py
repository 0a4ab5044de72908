"""Conformance kit for reasoning parsers: fixtures, streaming equivalence, odd input.

The checks live in :mod:`pyagent_core.testing.streaming`; this module adds the fixture type and
the context handed to the parser (a :class:`ReasoningParserContext`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

import attrs

from pyagent_core.interfaces.reasoning_parser import ReasoningParser, ReasoningParserContext
from pyagent_core.interfaces.tool_parser import StreamingParser
from pyagent_core.testing.streaming import Message, StreamingParserConformance
from pyagent_core.types import ReasoningParserSpec


@attrs.frozen
class ReasoningCase:
    """A model output and its expected split (``None`` or ``""`` for an empty part)."""

    text: str
    reasoning: str | None = None
    content: str | None = None


class ReasoningParserConformance(StreamingParserConformance):
    """Kit for :class:`ReasoningParser` s. Set ``impl``, ``spec`` and ``cases`` (:class:`ReasoningCase`)."""

    kind = "reasoning_parser"
    spec: ClassVar[ReasoningParserSpec]
    cases: ClassVar[Sequence[ReasoningCase]] = ()

    def make_context(self) -> ReasoningParserContext:
        """The context the parser is built with."""
        return ReasoningParserContext()

    def make_parser(self) -> ReasoningParser:
        """Construct the parser under test, ``cls(options, context)``."""
        parser: ReasoningParser = self.impl(self.make_options(), self.make_context())
        return parser

    def extracted(self, parser: StreamingParser[Any], text: str) -> Message:
        assert isinstance(parser, ReasoningParser)
        result = parser.extract(text)
        assert isinstance(result, tuple) and len(result) == 2, f"extract({text!r}) returned {result!r}"
        reasoning, content = result
        assert all(part is None or isinstance(part, str) for part in result), f"extract({text!r}): {result!r}"
        return Message(content or "", reasoning or "")

    def expected(self, case: ReasoningCase) -> Message:
        return Message(case.content or "", case.reasoning or "")
