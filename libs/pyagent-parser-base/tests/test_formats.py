"""Regions, call templates, XML values, harmony routing and the streaming driver, on small formats of their own."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from parser_base_helpers import SETTINGS, cuts_of, split

from pyagent_core.interfaces.tool_parser import ExtractedToolCalls
from pyagent_parser_base.emitter import Emitter, ToolSet
from pyagent_parser_base.harmony import CALL, CONTENT, DROP, REASONING, VERBATIM, Header, harmony_program
from pyagent_parser_base.jsonscan import call_list, call_object, dumps
from pyagent_parser_base.machine import Program, Run, Streaming
from pyagent_parser_base.named import NamedCall, repeated
from pyagent_parser_base.regions import Region, ToolFormat
from pyagent_parser_base.xml import XmlCall, schema_types, typed_value

SCHEMA: dict[str, Any] = {"type": "object", "properties": {
    "n": {"type": "integer"}, "x": {"type": "number"}, "flag": {"type": "boolean"}, "s": {"type": "string"},
    "either": {"type": ["integer", "string"]}, "maybe": {"anyOf": [{"type": "null"}, {"type": "object"}]},
    "unit": {"enum": ["c", "f", 0]},
}}
TOOLS = ({"type": "function", "function": {"name": "probe", "parameters": SCHEMA}},)


class Parser(Streaming):
    """The streaming driver over one program, as a parser class uses it."""

    def __init__(self, program: Program, tools: Sequence[Any] = TOOLS) -> None:
        self.program, self.tools = program, ToolSet(tools)

    def new_run(self) -> Run:
        return Run(self.program, Emitter(self.tools))

    def extract(self, text: str) -> ExtractedToolCalls:
        return self.run_whole(text).emitter.result()


def summary(result: ExtractedToolCalls) -> tuple[str | None, list[tuple[str, Any]]]:
    """Content and calls ``(name, decoded arguments)`` of ``result``."""
    return result.content, [(c.name, json.loads(c.arguments)) for c in result.tool_calls]


TAGS = ToolFormat(
    regions=(Region("[", call_list, at_start=True, in_body=True), Region("<c>", call_object, end="</c>")),
    render=lambda calls: "".join(f"<c>{dumps({'name': n, 'arguments': a})}</c>" for n, a in calls),
)


@pytest.mark.parametrize(
    ("text", "content", "calls", "errors"),
    [("[1, 2] is a list", "[1, 2] is a list", [], 0),  # opened like a call list, read again as content
     ('[{"name": "probe", "arguments": {"n": 1}}] ok', "ok", [("probe", {"n": 1})], 0),
     ('a <c>{"name": "probe" oops</c> b <c>{"name": "probe", "arguments": {}}</c> c', "a  b  c", [("probe", {})], 1),
     ('<c>{"name": "probe", "arguments": {"s": "x"}}', None, [("probe", {"s": "x"})], 0),  # end marker may be missing
     ('<c>{"name": "nope", "arguments": {}}</c>', None, [], 1)],
)
def test_regions_read_calls_recover_and_fall_back_to_content(text: str, content: str | None,
                                                             calls: list[Any], errors: int) -> None:
    result = Parser(TAGS.program).extract(text)
    assert summary(result) == (content, calls) and len(result.errors) == errors


def stream(parser: Parser, pieces: list[str]) -> tuple[str, list[tuple[str, Any]]]:
    """Content and calls of a stream of ``pieces`` through ``extract_delta`` and ``finish``."""
    content, calls, seen = "", [], ""
    deltas = []
    for piece in pieces:
        deltas.append(parser.extract_delta(seen, piece))
        seen += piece
    deltas.append(parser.finish(seen))
    for delta in filter(None, deltas):
        content += delta.content or ""
        for fragment in delta.tool_calls:
            if fragment.name is not None:
                calls.append((fragment.name, fragment.arguments))
            else:
                calls[fragment.index] = (calls[fragment.index][0], calls[fragment.index][1] + fragment.arguments)
    return content, [(name, json.loads(arguments)) for name, arguments in calls]


@SETTINGS
@given(data=st.data())
def test_a_stream_gives_what_extract_gives_and_a_parser_follows_one_stream_at_a_time(data: st.DataObject) -> None:
    text = ('Sure. <c>{"name": "probe", "arguments": {"s": "</c>", "n": 2}}</c> then [not a call] '
            '<c>{"name": "probe"}</c>')
    parser = Parser(TAGS.program)
    whole = parser.extract(text)
    expected = (whole.content, [(c.name, json.loads(c.arguments)) for c in whole.tool_calls])
    assert expected == ("Sure.  then [not a call]", [("probe", {"s": "</c>", "n": 2}), ("probe", {})])
    assert stream(parser, split(text, cuts_of(data, text))) == expected
    parser.extract_delta("", "half a stream <c>")
    parser.reset()  # and after reset, or an empty previous_text, a new stream starts
    assert stream(parser, split(text, cuts_of(data, text))) == expected
    parser.extract_delta("", "half a stream <c>")
    assert stream(parser, [text]) == expected


QWENISH = XmlCall(open="<function=", name_stops=(">",), name_close=">", param_open="<parameter=",
                  key_close=(">",), value_close="</parameter>", close="</function>")
QUOTED = XmlCall(open="<invoke name=", name_stops=(">",), name_close=">", param_open="<parameter name=",
                 key_close=(">",), value_close="</parameter>", close="</invoke>", render_name='"{}"', layout="inline")


@pytest.mark.parametrize(
    ("text", "schema", "value"),
    [("42", {"type": "integer"}, 42), ("4.5", {"type": "number"}, 4.5), ("True", {"type": "boolean"}, True),
     ("true", {"type": "boolean"}, True), ("007", {"type": "string"}, "007"), ("[1]", None, "[1]"),
     ("abc", {"type": ["integer", "string"]}, "abc"), ("12", {"type": ["integer", "string"]}, 12),
     ("None", {"anyOf": [{"type": "null"}, {"type": "object"}]}, None), ("0", {"enum": ["c", 0]}, 0),
     ("c", {"enum": ["c", 0]}, "c"), ("1", {"type": "boolean"}, 1), ("not json", {"type": "integer"}, "not json")],
)
def test_xml_values_are_typed_by_the_schema(text: str, schema: dict[str, Any] | None, value: Any) -> None:
    assert typed_value(text, schema) == value and type(typed_value(text, schema)) is type(value)


def test_schema_types_collects_types_enums_and_choices() -> None:
    assert schema_types(SCHEMA["properties"]["either"]) == {"integer", "string"}
    assert schema_types({"enum": ["a", 1, 1.5, True, None]}) == {"string", "integer", "number", "boolean", "null"}
    assert schema_types({"oneOf": [{"type": "array"}, {"anyOf": [{"type": "object"}]}]}) == {"array", "object"}
    assert schema_types(None) == set() and schema_types({}) == set()


ARGUMENTS = st.fixed_dictionaries({}, optional={
    "n": st.integers(-1000, 1000), "x": st.floats(-1e6, 1e6, allow_nan=False), "flag": st.booleans(),
    "s": st.text(st.characters(exclude_categories=["Cs"], exclude_characters="<"), max_size=8),
    "maybe": st.none() | st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
})


@SETTINGS
@given(arguments=ARGUMENTS, call=st.sampled_from([QWENISH, QUOTED]), data=st.data())
def test_xml_calls_render_and_read_back_typed(arguments: dict[str, Any], call: XmlCall, data: st.DataObject) -> None:
    fmt = ToolFormat(regions=(Region("<tool>", repeated(call.body, call.open), end="</tool>"),),
                     render=lambda calls: "<tool>" + "".join(call.render_all(calls)) + "</tool>")
    text = "Calling. " + fmt.render([("probe", arguments), ("probe", {})])
    expected = ("Calling.", [("probe", arguments), ("probe", {})])
    assert summary(Parser(fmt.program).extract(text)) == expected
    assert stream(Parser(fmt.program), split(text, cuts_of(data, text))) == expected


def test_a_named_template_reads_what_it_writes() -> None:
    call = NamedCall("<call_begin>{name}:{args}<call_end>",
                     parse_name=lambda raw: (raw.removeprefix("fn.").rsplit(".", 1)[0], raw),
                     write_name=lambda name, index: f"fn.{name}.{index}")
    fmt = ToolFormat(regions=(Region("<calls>", repeated(call.body, call.opener), end="</calls>"),),
                     render=lambda calls: "<calls>" + call.render(calls, "\n") + "</calls>")
    text = fmt.render([("probe", {"n": 1}), ("probe", {"s": "東京"})])
    assert text == ('<calls><call_begin>fn.probe.0:{"n": 1}<call_end>\n'
                    '<call_begin>fn.probe.1:{"s": "東京"}<call_end></calls>')
    result = Parser(fmt.program).extract("Before " + text)
    assert summary(result) == ("Before", [("probe", {"n": 1}), ("probe", {"s": "東京"})])
    assert [c.id for c in result.tool_calls] == ["fn.probe.0", "fn.probe.1"]
    assert len(Parser(fmt.program).extract("<calls><call_begin>two words:{}<call_end></calls>").errors) == 1


def route(header: Header) -> str:
    """Every role once: analysis is reasoning, calls to ``verbatim.*`` pass through, ``skip`` is dropped."""
    if header.recipient is not None:
        return VERBATIM if header.recipient.startswith("verbatim.") else CALL
    return {"analysis": REASONING, "skip": DROP}.get(header.channel, CONTENT)


HARMONY = (
    "<|channel|>analysis<|message|>Think.<|end|>"
    '<|start|>assistant<|channel|>commentary to=functions.probe <|constrain|>json<|message|>{"n": 3}<|call|>'
    "<|start|>assistant<|channel|>skip<|message|>gone<|end|>"
    '<|start|>assistant to=verbatim.x<|channel|>commentary<|message|>{"kept": true}<|call|>'
    "<|start|>assistant<|channel|>final<|message|>Done.<|return|>"
)


@SETTINGS
@given(data=st.data())
def test_harmony_messages_go_where_the_router_says(data: st.DataObject) -> None:
    verbatim = '<|start|>assistant to=verbatim.x<|channel|>commentary<|message|>{"kept": true}<|call|>'
    emitter = Parser(harmony_program(route)).run_whole(HARMONY).emitter
    assert (emitter.reasoning.text(), emitter.content.text()) == ("Think.", verbatim + "Done.")
    assert summary(emitter.result())[1] == [("probe", {"n": 3})]
    assert stream(Parser(harmony_program(route)), split(HARMONY, cuts_of(data, HARMONY))) == (
        verbatim + "Done.", [("probe", {"n": 3})])


def test_harmony_headers() -> None:
    header = Header.parse("<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json")
    assert (header.channel, header.recipient, header.tool) == ("commentary", "functions.get_weather", "get_weather")
    assert Header.parse("<|channel|>final").tool is None


def test_repeated_calls_skip_a_bad_one_and_keep_its_neighbours() -> None:
    call = NamedCall("<b>{name}:{args}<e>")
    fmt = ToolFormat(regions=(Region("<calls>", repeated(call.body, call.opener, call.closer, until="</calls>"),
                                     end="</calls>"),), render=lambda calls: "")
    text = '<calls><b>probe:{"n": 1<e><b>probe:{"n": 2}<e></calls>after <calls><b>probe:{"n" 3}<e></calls>end'
    result = Parser(fmt.program).extract(text)
    assert summary(result) == ("after end", [("probe", {"n": 2})]) and len(result.errors) == 2
    lenient = ToolFormat(regions=(Region("<calls>", repeated(call.body, call.opener), end="</calls>"),),
                         render=lambda calls: "")
    assert summary(Parser(lenient.program).extract(text)) == ("after end", [])  # without `until`: the region fails


@pytest.mark.parametrize("call", [QWENISH, QUOTED])
def test_xml_text_values_stream_as_they_arrive(call: XmlCall) -> None:
    fmt = ToolFormat(regions=(Region("<tool>", repeated(call.body, call.open), end="</tool>"),),
                     render=lambda calls: "<tool>" + "".join(call.render_all(calls)) + "</tool>")
    value = 'line "one"\n\\ 東京 </param ' * 20
    text = fmt.render([("probe", {"s": value, "n": 12345})])
    parser = Parser(fmt.program)
    deltas = [parser.extract_delta(text[:at], text[at:at + 3]) for at in range(0, len(text), 3)]
    pieces = [f.arguments for d in [*deltas, parser.finish(text)] if d for f in d.tool_calls]
    assert json.loads("".join(pieces)) == {"s": value, "n": 12345}
    assert len(pieces) > len(value) // 6  # the text value came piece by piece (a possible closing tag waits)
    assert any("12345" in piece for piece in pieces)  # a typed value comes whole, once its closing tag is there
