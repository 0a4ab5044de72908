"""Meta-tests of the tool-parser kit: the scaffold's JSON-in-tags parser passes it, broken variants fail it."""

from __future__ import annotations

import json

import attrs
import pytest

from pyagent_core.interfaces.tool_parser import DeltaMessage, DeltaToolCall, ExtractedToolCalls, ToolCall, ToolParser
from pyagent_core.testing.scaffolded import import_template
from pyagent_core.testing.tool_parser import ToolParserConformance

reference = import_template("tool_parser")
TaggedJsonParser = reference.impl.KitReference
Parsed = reference.impl.Parsed
# The scaffold's own conformance test, with its cases, run here on the tagged-JSON parser it scaffolds.
TestTaggedJsonParser = reference.tests.TestKitReference


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


def _kit(impl: type[ToolParser]) -> ToolParserConformance:
    return type(f"{impl.__name__}Kit", (TestTaggedJsonParser,), {"impl": impl})()


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
