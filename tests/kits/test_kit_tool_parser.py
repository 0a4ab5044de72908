"""Meta-tests of the tool-parser kit: a JSON-in-tags parser passes it, broken variants fail it."""

from __future__ import annotations

import json

import attrs
import pytest

from pyagent_core.interfaces.tool_parser import (
    DeltaMessage,
    DeltaToolCall,
    ExtractedToolCalls,
    ToolCall,
    ToolParser,
)
from pyagent_core.testing.tool_parser import ToolParserCase, ToolParserConformance
from pyagent_core.types import ToolParserSpec

OPEN, CLOSE = "<tool_call>", "</tool_call>"


def partial_marker(text: str, marker: str) -> int:
    """Length of the longest proper prefix of ``marker`` that ``text`` ends with."""
    return next((n for n in range(len(marker) - 1, 0, -1) if text.endswith(marker[:n])), 0)


@attrs.frozen
class Parsed:
    """Content, complete calls ``(name, arguments JSON)`` and errors found in a text."""

    content: str
    calls: tuple[tuple[str, str], ...]
    errors: tuple[str, ...]


class TaggedJsonParser(ToolParser):
    """Calls are ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``; the rest is content.

    An unclosed block is content; a block whose JSON is bad is an error and is dropped. Streaming
    is stateless: the parse of ``previous_text`` (holding back what could still change) is what was
    already emitted, and each call is emitted whole once its closing tag arrives.
    """

    def parse(self, text: str, final: bool) -> Parsed:
        """Parse ``text``; unless ``final``, leave out anything that could still change."""
        content: list[str] = []
        calls: list[tuple[str, str]] = []
        errors: list[str] = []
        pos = 0
        while (start := text.find(OPEN, pos)) >= 0:
            content.append(text[pos:start])
            end = text.find(CLOSE, start)
            if end < 0:
                break
            body = text[start + len(OPEN):end]
            call = self.parse_call(body)
            if isinstance(call, tuple):
                calls.append(call)
            else:
                errors.append(call)
            pos = end + len(CLOSE)
        else:
            start = len(text)
            content.append(text[pos:] if final else text[pos:len(text) - partial_marker(text[pos:], OPEN)])
        if final and start < len(text):
            content.append(text[start:])
        return Parsed("".join(content), tuple(calls), tuple(errors))

    @staticmethod
    def parse_call(body: str) -> tuple[str, str] | str:
        """``(name, arguments JSON)`` of a block, or the error message."""
        try:
            call = json.loads(body)
        except ValueError as error:
            return f"tool call {body!r} is not JSON: {error}"
        if not isinstance(call, dict) or not isinstance(call.get("name"), str):
            return f"tool call {body!r} has no name"
        if not isinstance(call.get("arguments", {}), dict):
            return f"tool call {body!r} has non-object arguments"
        return call["name"], json.dumps(call.get("arguments", {}))

    def extract(self, text: str) -> ExtractedToolCalls:
        parsed = self.parse(text, final=True)
        calls = [ToolCall(name, arguments) for name, arguments in parsed.calls]
        return ExtractedToolCalls(parsed.content or None, calls, parsed.errors)

    def extract_delta(self, previous_text: str, delta_text: str) -> DeltaMessage | None:
        before = self.parse(previous_text, final=False)
        return self.difference(before, self.parse(previous_text + delta_text, final=False))

    def finish(self, text: str) -> DeltaMessage | None:
        return self.difference(self.parse(text, False), self.parse(text, True))

    def difference(self, before: Parsed, after: Parsed) -> DeltaMessage | None:
        """What ``after`` adds to ``before``: new content and new whole calls."""
        content = after.content[len(before.content):]
        new_calls = [
            self.fragment(index, name, arguments)
            for index, (name, arguments) in enumerate(after.calls)
            if index >= len(before.calls)
        ]
        return DeltaMessage(content=content or None, tool_calls=new_calls) if content or new_calls else None

    def fragment(self, index: int, name: str, arguments: str) -> DeltaToolCall:
        """A whole call as one streamed fragment."""
        return DeltaToolCall(index, ToolCall(name, arguments).id, name, arguments)


class RepeatingIdParser(TaggedJsonParser):
    """Broken: streams a call as a name fragment and an arguments fragment that repeats the id."""

    def difference(self, before: Parsed, after: Parsed) -> DeltaMessage | None:
        delta = super().difference(before, after)
        if delta is None or not delta.tool_calls:
            return delta
        split = []
        for call in delta.tool_calls:
            split += [attrs.evolve(call, arguments=""), attrs.evolve(call, name=None)]
        return attrs.evolve(delta, tool_calls=split)


class StrippingParser(TaggedJsonParser):
    """Broken: extract() strips the content, the stream does not."""

    def extract(self, text: str) -> ExtractedToolCalls:
        result = super().extract(text)
        return attrs.evolve(result, content=(result.content or "").strip() or None)


class CrashingParser(TaggedJsonParser):
    """Broken: lets a JSON error escape from a malformed call."""

    @staticmethod
    def parse_call(body: str) -> tuple[str, str] | str:
        call = json.loads(body)
        return call["name"], json.dumps(call["arguments"])


SPEC = ToolParserSpec(name="tagged-json-test", impl=f"{__name__}:TaggedJsonParser", summary="test-local")

CASES = (
    ToolParserCase("Hello there.", content="Hello there."),
    ToolParserCase(
        'Let me check.\n<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>',
        content="Let me check.\n",
        calls=[("get_weather", {"city": "Paris"})],
    ),
    ToolParserCase(
        '<tool_call>{"name": "add", "arguments": {"a": 1, "b": 2}}</tool_call>\n'
        '<tool_call>{"name": "get_weather", "arguments": {"city": "Oslo", "unit": "C"}}</tool_call>',
        content="\n",
        calls=[("add", {"a": 1, "b": 2}), ("get_weather", {"city": "Oslo", "unit": "C"})],
    ),
    ToolParserCase(
        '<tool_call>{"name": "add", "arguments": {"a": 1,}}</tool_call>done', content="done", errors=1
    ),
    ToolParserCase('Text <tool_call>{"name": "add"', content='Text <tool_call>{"name": "add"'),
    ToolParserCase("a < b <tool", content="a < b <tool"),
)


class TestTaggedJsonParser(ToolParserConformance):
    impl = TaggedJsonParser
    spec = SPEC
    cases = CASES
    markers = (OPEN, CLOSE)


def _kit(impl: type[ToolParser]) -> ToolParserConformance:
    attributes = {"impl": impl, "spec": SPEC, "cases": CASES, "markers": (OPEN, CLOSE)}
    return type(f"{impl.__name__}Kit", (ToolParserConformance,), attributes)()


@pytest.mark.parametrize(
    ("impl", "check"),
    [
        (RepeatingIdParser, "test_streaming_in_one_chunk_and_by_character"),
        (StrippingParser, "test_extract_matches_cases"),
        (StrippingParser, "test_streaming_at_random_split_points"),
        (CrashingParser, "test_odd_input_never_raises"),
    ],
)
def test_kit_catches_broken_parser(impl: type[ToolParser], check: str) -> None:
    with pytest.raises(AssertionError):
        getattr(_kit(impl), check)()


def test_openai_shapes() -> None:
    call = ToolCall("add", '{"a": 1}', id="call_1")
    function = {"name": "add", "arguments": '{"a": 1}'}
    assert call.to_openai() == {"id": "call_1", "type": "function", "function": function}
    assert DeltaToolCall(0, "call_1", "add").to_openai() == {
        "index": 0, "id": "call_1", "type": "function", "function": {"name": "add", "arguments": ""}}
    assert DeltaToolCall(0, arguments="{").to_openai() == {"index": 0, "function": {"arguments": "{"}}
    assert ToolCall("a", "{}").id != ToolCall("a", "{}").id
