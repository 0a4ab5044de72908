"""Channels trim like ``str.strip``; the tool set checks definitions and arguments; deltas add up to the result."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st
from parser_base_helpers import SETTINGS

from pyagent_core.errors import RequestError
from pyagent_parser_base.emitter import Channel, Emitter, ToolSet

ADD = {"type": "function", "function": {"name": "add", "parameters": {
    "type": "object", "properties": {"a": {"type": "number"}}, "required": ["a"]}}}


@SETTINGS
@given(pieces=st.lists(st.text(alphabet=" \n\tab東", max_size=5), max_size=8), takes=st.data())
def test_a_channel_is_its_text_stripped_and_its_pieces_add_up(pieces: list[str], takes: st.DataObject) -> None:
    channel = Channel()
    taken = []
    for piece in pieces:
        channel.write(piece)
        if takes.draw(st.booleans(), label="take now"):
            taken.append(channel.take() or "")
    taken.append(channel.take() or "")
    expected = "".join(pieces).strip()
    assert channel.text() == (expected or None)
    assert "".join(taken) == expected


@pytest.mark.parametrize(
    ("tools", "message"),
    [([{"type": "function"}], "tool 0 is not an OpenAI function definition"),
     ([ADD, "add"], "tool 1 is not an OpenAI function definition"),
     ([{"function": {"name": "f", "parameters": [1]}}], "the parameters of tool 'f' must be a JSON schema object")],
)
def test_malformed_tools_are_request_errors(tools: list[object], message: str) -> None:
    with pytest.raises(RequestError, match=message):
        ToolSet(tools)  # type: ignore[arg-type]


def test_arguments_are_checked_as_json_then_against_the_schema() -> None:
    tools = ToolSet([ADD])
    assert tools.knows("add") and not tools.knows("sub") and ToolSet([]).knows("anything")
    assert tools.property_schema("add", "a") == {"type": "number"} and tools.property_schema("add", "b") is None
    assert tools.problem("add", '{"a": 1.5}') is None
    assert "not valid JSON" in (tools.problem("add", '{"a": ') or "")
    assert "not a JSON object" in (tools.problem("add", "[1]") or "")
    assert "do not match the tool's schema at a" in (tools.problem("add", '{"a": "one"}') or "")
    assert "do not match the tool's schema at (the arguments)" in (tools.problem("add", "{}") or "")
    bad = ToolSet([{"function": {"name": "f", "parameters": {"type": "no-such-type"}}}])
    with pytest.raises(RequestError, match="the parameters schema of tool 'f' is invalid"):
        bad.problem("f", "{}")


def test_deltas_carry_each_call_once_and_add_up_to_the_result() -> None:
    out = Emitter(ToolSet([ADD]))
    out.text("  Sure. ")
    out.start_call("add", "call_model")
    out.args('{"a"')
    first = out.take_delta()
    out.args(": 2}")
    out.end_call()
    out.start_call("sub")  # not offered: reported, never streamed
    out.args("{}")
    out.end_call()
    out.start_call("add", "call_model")  # a repeated id is replaced
    out.args('{"a": "x"}')  # invalid for the schema: streamed without its closing brace, left out of the result
    out.end_call()
    second = out.take_delta()
    assert first is not None and second is not None and out.take_delta() is None
    assert first.content == "Sure." and [(d.index, d.id, d.name, d.arguments) for d in first.tool_calls] == [
        (0, "call_model", "add", '{"a"')]
    assert [(d.index, d.name, d.arguments) for d in second.tool_calls] == [(0, None, ": 2}"), (1, "add", '{"a": "x"')]
    assert second.tool_calls[1].id not in (None, "call_model")
    result = out.result()
    assert result.content == "Sure." and [(c.id, c.name, json.loads(c.arguments)) for c in result.tool_calls] == [
        ("call_model", "add", {"a": 2})]
    assert [e.split(":")[0] for e in result.errors] == ["tool call 'sub'", "tool call 'add'"]


def test_a_failed_call_is_dropped_and_reported() -> None:
    out = Emitter(ToolSet([]))
    out.start_call("f")
    out.args('{"a": ')
    out.fail("the text ends inside the arguments")
    out.fail("a region without a call")
    result = out.result()
    assert result.tool_calls == () and result.errors == (
        "tool call 'f': the text ends inside the arguments", "a region without a call")


def test_a_call_streams_only_json_and_appears_with_its_first_valid_text() -> None:
    out = Emitter(ToolSet([]))
    out.start_call("f")
    out.args("hello")  # arguments given as a string that is no JSON object: reported, never streamed
    out.args("{}")  # ignored
    out.fail("its region breaks off later")  # the call was reported already
    out.start_call("g")
    out.args("{")
    assert out.take_delta() is None  # "{" alone: the call is not shown until more is known
    out.args('"k": tru')
    delta = out.take_delta()
    assert delta is not None and [(d.index, d.name, d.arguments) for d in delta.tool_calls] == [(0, "g", '{"k": ')]
    out.args("e}")
    delta = out.take_delta()  # the closing brace waits for the end of the call
    assert delta is not None and [(d.index, d.arguments) for d in delta.tool_calls] == [(0, "true")]
    out.end_call()
    delta = out.take_delta()
    assert delta is not None and [(d.index, d.arguments) for d in delta.tool_calls] == [(0, "}")]
    result = out.result()
    assert [(c.name, c.arguments) for c in result.tool_calls] == [("g", '{"k": true}')]
    assert len(result.errors) == 1 and "'f'" in result.errors[0] and "must be a JSON object" in result.errors[0]
