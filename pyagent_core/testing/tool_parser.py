"""Conformance kit for tool-call parsers: fixtures, streaming equivalence, odd input.

The checks themselves live in :mod:`pyagent_core.testing.streaming`; this module adds the fixture
type, the context handed to the parser (a :class:`ToolParserContext` holding the kit's tools) and
the tool-call specific checks (ids, errors).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, ClassVar

import attrs
from hypothesis import assume, given
from hypothesis import strategies as st

from pyagent_core.errors import RequestError
from pyagent_core.interfaces.grammar import ConstraintSpec
from pyagent_core.interfaces.tool_parser import ExtractedToolCalls, StreamingParser, ToolParser, ToolParserContext
from pyagent_core.testing.streaming import Message, StreamingParserConformance, cut_points, stream
from pyagent_core.testing.support import kit_settings
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

KIT_EXAMPLES: dict[str, dict[str, Any]] = {
    "get_weather": {"city": "Paris", "unit": "celsius"}, "add": {"a": 1, "b": 2.5},
}
"""Arguments valid for :data:`KIT_TOOLS`, written into constraints' structures and parsed back."""

PROBE_TOOL = _function("probe", {
    "s": {"type": "string"}, "n": {"type": "number"}, "i": {"type": "integer"}, "b": {"type": "boolean"},
    "o": {"type": "object"}, "a": {"type": "array"},
})
"""The tool of the round-trip check: one parameter of each JSON type."""


def probe_arguments() -> st.SearchStrategy[dict[str, Any]]:
    """Arguments for :data:`PROBE_TOOL`: any subset of its parameters, unicode and nesting included."""
    text = st.text(st.characters(exclude_categories=["Cs"]), max_size=10)
    number = st.integers(-10**12, 10**12) | st.floats(allow_nan=False, allow_infinity=False)
    values = st.recursive(
        st.none() | st.booleans() | number | text,
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(text, inner, max_size=3), max_leaves=6,
    )
    return st.fixed_dictionaries({}, optional={
        "s": text, "n": number, "i": st.integers(-10**12, 10**12), "b": st.booleans(),
        "o": st.dictionaries(text, values, max_size=3), "a": st.lists(values, max_size=3),
    })


class ToolParserConformance(StreamingParserConformance):
    """Kit for :class:`ToolParser` s. Set ``impl``, ``spec`` and ``cases`` (:class:`ToolParserCase`)."""

    kind = "tool_parser"
    spec: ClassVar[ToolParserSpec]
    cases: ClassVar[Sequence[ToolParserCase]] = ()
    tools: ClassVar[Sequence[Mapping[str, Any]]] = KIT_TOOLS
    roundtrip_excludes: ClassVar[tuple[str, ...]] = ()
    """Text the format cannot carry inside arguments (e.g. an XML format's closing tag)."""

    def render_calls(self, parser: ToolParser, calls: Sequence[tuple[str, dict[str, Any]]]) -> str | None:
        """``calls`` written as the model writes them, for the round-trip check; ``None`` skips it."""
        return None

    def make_context(self, tools: Sequence[Mapping[str, Any]] | None = None) -> ToolParserContext:
        """The context the parser is built with: ``tools`` (default: the class's ``tools``)."""
        return ToolParserContext(tools=self.tools if tools is None else tools)

    def make_parser(self, tools: Sequence[Mapping[str, Any]] | None = None) -> ToolParser:
        """Construct the parser under test, ``cls(options, context)``, with ``tools`` (default: ``tools``)."""
        parser: ToolParser = self.impl(self.make_options(), self.make_context(tools))
        return parser

    def extract(self, parser: StreamingParser[Any], text: str) -> ExtractedToolCalls:
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

    def extracted(self, parser: StreamingParser[Any], text: str) -> Message:
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

    @kit_settings(max_examples=20)
    @given(data=st.data())
    def test_rendered_calls_parse_back_exactly(self, data: st.DataObject) -> None:
        calls = [("probe", a) for a in data.draw(st.lists(probe_arguments(), min_size=1, max_size=3), label="calls")]
        parser = self.make_parser([*self.tools, PROBE_TOOL])
        text = self.render_calls(parser, calls)
        if text is None:
            return
        assume(not any(x in json.dumps(calls, ensure_ascii=False) for x in self.roundtrip_excludes))
        result = self.extract(parser, text)
        label = f"round trip of {calls!r} through {text!r}"
        assert not result.errors, f"{label}: errors {list(result.errors)}"
        assert [(c.name, json.loads(c.arguments)) for c in result.tool_calls] == calls, f"{label}: got {result}"
        fresh = self.make_parser([*self.tools, PROBE_TOOL])
        streamed = stream(fresh, text, cut_points(data, text), label)
        assert streamed.decoded(label).calls == tuple(calls), f"{label}: streamed {streamed}"

    def test_constraint_for_tool_choice_parses_back(self) -> None:
        parser = self.make_parser()
        assert parser.constraint_for("auto") is None and parser.constraint_for("none") is None
        first = self.tools[0]["function"]["name"]
        for choice, allowed in (("required", {t["function"]["name"] for t in self.tools}),
                                ({"type": "function", "function": {"name": first}}, {first})):
            try:
                constraint = parser.constraint_for(choice)
            except RequestError:
                continue  # the format cannot be described by the constraint kinds; the parser says so
            assert isinstance(constraint, ConstraintSpec), f"constraint_for({choice!r}) returned {constraint!r}"
            if constraint.structural_tag is not None:
                self._check_structures(json.loads(constraint.structural_tag), allowed, choice)
        try:
            parser.constraint_for({"type": "function", "function": {"name": "no_such_tool"}})
        except RequestError:
            return
        raise AssertionError("constraint_for a tool that is not in the request must raise RequestError")

    def _check_structures(self, tag: Mapping[str, Any], allowed: set[str], choice: Any) -> None:
        """The tag forces a call; each structure, filled with example arguments, parses back into one call
        of its tool."""
        assert tag.get("at_least_one") is True, f"constraint_for({choice!r}) must force a call: {tag}"
        if "separator" in tag:  # calls only: two of them, separated, parse back into two calls
            first = tag["structures"][0]
            written = first["begin"] + "{}" + first["end"]
            pair = self.extract(self.make_parser(tools=()), written + tag["separator"] + written)
            assert len(pair.tool_calls) == 2, f"{choice!r}: two calls joined by the separator parsed as {pair}"
        names = set()
        for structure in tag["structures"]:
            assert "separator" in tag or any(structure["begin"].startswith(t) for t in tag["triggers"]), (
                f"{choice!r}: {structure}")
            untyped = self.make_parser(tools=())  # no tools: no schema to fail with {}
            probe = self.extract(untyped, structure["begin"] + "{}" + structure["end"])
            assert len(probe.tool_calls) == 1, f"{choice!r}: {structure} with {{}} parsed as {probe}"
            name = probe.tool_calls[0].name
            example = KIT_EXAMPLES.get(name, {})
            text = structure["begin"] + json.dumps(example) + structure["end"]
            result = self.extract(self.make_parser() if name in KIT_EXAMPLES else untyped, text)
            assert [(c.name, json.loads(c.arguments)) for c in result.tool_calls] == [(name, example)], (
                f"{choice!r}: {text!r} parsed as {result}"
            )
            names.add(name)
        assert names == allowed, f"constraint_for({choice!r}) covers tools {names}, expected {allowed}"

