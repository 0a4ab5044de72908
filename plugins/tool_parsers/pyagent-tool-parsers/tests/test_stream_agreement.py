"""Streaming and ``extract`` agree on every text, malformed ones included, however it is split.

The property: every streamed call's arguments are the start of a JSON object; the streamed calls
whose arguments are complete JSON are exactly ``extract``'s calls (names and argument text); and
every other streamed call is one ``extract`` reports in ``errors``, left with arguments that are
not complete JSON (a stream cannot take text back).
Streamed content equals extracted content. Texts: every fixture (malformed ones included), the
shapes of vLLM's parser tests where pyagent used to disagree, and fuzz glued from those and the
formats' markers. Then the XML formats must stream a long text parameter as it arrives.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import pytest
import test_tool_parsers_conformance as kits
from fixtures import TOOLS
from hypothesis import given
from hypothesis import strategies as st

from pyagent_core.interfaces.tool_parser import ToolParserContext
from pyagent_core.testing.streaming import cut_points, merge_deltas, odd_texts, stream
from pyagent_core.testing.support import kit_settings
from pyagent_tool_parsers import parser

KITS: dict[str, type[kits.FamilyKit]] = {
    name: kit for name, kit in vars(kits).items()
    if name.startswith("Test") and isinstance(kit, type) and issubclass(kit, kits.FamilyKit)
}

_SF = "get_weather(city='San Francisco', metric='celsius')"
VLLM_SHAPES: dict[str, tuple[str, ...]] = {
    "TestHermes": tuple(
        f'<tool_call>{{"name": "do_thing", "arguments": {arguments}}}</tool_call>'
        for arguments in ('"hello"', '"{hello world}"', '"[oops"', json.dumps('{"a": 1} tail text'))),
    "TestLlama3Json": ('{"name": "x", "parameters": {invalid json}',),
    "TestPythonic": ("[foo(x=1])]", f"[bad(x=b'z'), {_SF}]", f"[calc(x=1e999), {_SF}]"),
    "TestKimiK2": (
        "Help. <|tool_calls_section_begin|><|tool_call_begin|>functions.bad:0<|tool_call_argument_begin|>"
        '{"city": "Beijing"<|tool_call_end|><|tool_call_begin|>functions.good:1<|tool_call_argument_begin|>'
        '{"city": "Shanghai"}<|tool_call_end|><|tool_calls_section_end|>',),
}
"""Model outputs from vLLM's parser tests on which pyagent's stream and ``extract`` disagreed."""


def texts(kit: str) -> list[str]:
    """The texts a kit's parser is checked on: its fixtures and the vLLM shapes for it."""
    return [case.text for case in KITS[kit].cases] + list(VLLM_SHAPES.get(kit, ()))


def parses(arguments: str) -> bool:
    try:
        json.loads(arguments)
    except ValueError:
        return False
    return True


def json_object_prefix(text: str) -> bool:
    """Whether ``text`` can be continued into a JSON object, judged by where ``json.loads`` gives up.

    Truncated JSON cut between tokens (the stream never passes on part of a token) fails exactly at its
    end; an open string is closed and judged again.
    """
    if not text.strip():
        return True
    try:
        return isinstance(json.loads(text), dict)
    except json.JSONDecodeError as error:
        if error.msg.startswith("Unterminated string"):
            return json_object_prefix(text + '"')
        return error.pos == len(text) and text.lstrip().startswith("{")


def check_agreement(kit: type[kits.FamilyKit], tools: Sequence[Any], text: str, cuts: list[int]) -> None:
    """The property of the module docstring, for one text split at ``cuts``."""
    label = f"{kit.__name__} with {len(tools)} tools, streaming {text!r} cut at {sorted(cuts)}"
    make = lambda: kit.impl(dict(kit.options), ToolParserContext(tools=tools))  # noqa: E731
    whole = make().extract(text)
    streamed = stream(make(), text, cuts, label)
    complete = [(name, arguments) for name, arguments in streamed.calls if parses(arguments)]
    assert complete == [(c.name, c.arguments) for c in whole.tool_calls], f"{label}: streamed {streamed}, got {whole}"
    assert len(streamed.calls) - len(complete) <= len(whole.errors), f"{label}: {streamed} vs errors {whole.errors}"
    assert all(json_object_prefix(arguments) for _, arguments in streamed.calls), f"{label}: streamed {streamed}"
    assert streamed.content == (whole.content or ""), f"{label}: streamed {streamed}, got {whole}"


@pytest.mark.parametrize("kit", sorted(VLLM_SHAPES))
def test_vllm_shapes_stream_as_they_extract(kit: str) -> None:
    for text in VLLM_SHAPES[kit]:
        for tools in (TOOLS, ()):
            for cuts in ([], list(range(1, len(text)))):
                check_agreement(KITS[kit], tools, text, cuts)


@pytest.mark.parametrize("kit", sorted(KITS))
@kit_settings(max_examples=60)
@given(data=st.data())
def test_streamed_calls_are_the_extracted_calls(kit: str, data: st.DataObject) -> None:
    cls = KITS[kit]
    known = texts(kit)
    text = data.draw(st.sampled_from(known) | odd_texts([*cls.markers, *known]), label="text")
    tools = data.draw(st.sampled_from([TOOLS, ()]), label="tools")
    check_agreement(cls, tools, text, cut_points(data, text))


WRITE_FILE = ({"type": "function", "function": {"name": "write_file", "parameters": {"type": "object", "properties": {
    "path": {"type": "string"}, "content": {"type": "string"}, "mode": {"type": "integer"}}}}},)
CONTENT = "".join(f'def f{i}(x):\n    return "<{i}>" + x  # é \\ 東京 </para\n' for i in range(80))[:3584]


@pytest.mark.parametrize("cls", [parser.Qwen3CoderToolParser, parser.Glm45ToolParser, parser.MinimaxM2ToolParser])
def test_xml_formats_stream_a_long_text_parameter_as_it_arrives(cls: type[parser.FormatToolParser]) -> None:
    arguments = {"path": "src/f.py", "content": CONTENT, "mode": 420}
    context = ToolParserContext(tools=WRITE_FILE)
    text = cls({}, context).render([("write_file", arguments)])
    whole = cls({}, context).extract(text)
    assert [(c.name, json.loads(c.arguments)) for c in whole.tool_calls] == [("write_file", arguments)]
    streaming = cls({}, context)
    deltas = [streaming.extract_delta(text[:i], text[i:i + 4]) for i in range(0, len(text), 4)]
    deltas.append(streaming.finish(text))
    carrying = [d for d in deltas if d is not None and any(f.arguments for f in d.tool_calls)]
    assert len(carrying) >= len(CONTENT) // 4 * 0.9, f"{cls.__name__}: the arguments came in {len(carrying)} deltas"
    merged = merge_deltas(deltas, cls.__name__)
    assert merged.calls == (("write_file", whole.tool_calls[0].arguments),)
