"""Chat completions through the official ``openai`` client: streamed and not, n, usage, structured output, tools."""

from __future__ import annotations

import json
import re
from typing import Any

import jsonschema
import pytest

from pyagent_engine.api.llm import LLM
from pyagent_engine.requests.params import SamplingParams

from .conftest import MODEL, Server

HELLO = [{"role": "user", "content": "Say hello to a friend."}]

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 20},
                                                         "unit": {"enum": ["c", "f"]}},
                       "required": ["city", "unit"], "additionalProperties": False},
    },
}
TIME = {
    "type": "function",
    "function": {"name": "get_time", "parameters": {"type": "object", "properties": {
        "zone": {"type": "string", "maxLength": 10}}, "required": ["zone"], "additionalProperties": False}},
}


def sse_events(server: Server, path: str, body: dict[str, Any]) -> list[Any]:
    """The JSON events of a streamed response, read raw (``"[DONE]"`` kept as that string)."""
    response = server.post(path, body)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/event-stream")
    events = []
    for block in response.text.split("\n\n"):
        if block.strip():
            assert block.startswith("data: "), block
            data = block.removeprefix("data: ")
            events.append(data if data == "[DONE]" else json.loads(data))
    return events


def test_greedy_reply_equals_llm_generate_and_usage_counts_tokens(client: Any, llm: LLM) -> None:
    reply = client.chat.completions.create(model=MODEL, messages=HELLO, max_tokens=24, temperature=0)
    [expected] = llm.generate([HELLO], SamplingParams(max_tokens=24, temperature=0))
    choice = reply.choices[0]
    assert reply.object == "chat.completion" and reply.model == MODEL
    assert choice.message.role == "assistant" and choice.message.content == expected.text
    assert choice.finish_reason == expected.finish_reason
    assert reply.usage.prompt_tokens == len(expected.prompt_token_ids)
    assert reply.usage.completion_tokens == len(expected.output_token_ids)
    assert reply.usage.total_tokens == reply.usage.prompt_tokens + reply.usage.completion_tokens


def test_stream_has_openai_shape_and_equals_the_non_streamed_text(server: Server, client: Any) -> None:
    body = {"model": MODEL, "messages": HELLO, "max_tokens": 20, "temperature": 0, "n": 2,
            "stream": True, "stream_options": {"include_usage": True}}
    events = sse_events(server, "/v1/chat/completions", body)
    assert events[-1] == "[DONE]"
    usage_chunk, chunks = events[-2], events[:-2]
    assert usage_chunk["choices"] == [] and usage_chunk["usage"]["completion_tokens"] > 0
    assert all(c["object"] == "chat.completion.chunk" and c["usage"] is None for c in chunks)
    assert len({c["id"] for c in events[:-1]}) == 1
    plain = client.chat.completions.create(model=MODEL, messages=HELLO, max_tokens=20, temperature=0, n=2)
    for index in range(2):
        mine = [c["choices"][0] for c in chunks if c["choices"][0]["index"] == index]
        assert mine[0]["delta"] == {"role": "assistant", "content": ""}
        finishing = [c for c in mine if c["finish_reason"] is not None]
        assert len(finishing) == 1 and finishing[0] is mine[-1] and finishing[0]["delta"] == {}
        text = "".join(c["delta"].get("content", "") for c in mine)
        assert text == plain.choices[index].message.content
        assert finishing[0]["finish_reason"] == plain.choices[index].finish_reason
    assert usage_chunk["usage"]["completion_tokens"] == plain.usage.completion_tokens


def test_openai_client_stream_and_n_with_seed(client: Any) -> None:
    stream = client.chat.completions.create(model=MODEL, messages=HELLO, max_tokens=12, temperature=1.0,
                                            seed=7, n=3, stream=True)
    texts = [""] * 3
    for chunk in stream:
        for choice in chunk.choices:
            texts[choice.index] += choice.delta.content or ""
    again = client.chat.completions.create(model=MODEL, messages=HELLO, max_tokens=12, temperature=1.0, seed=7, n=3)
    assert [c.index for c in again.choices] == [0, 1, 2]
    assert [c.message.content for c in again.choices] == texts


def test_text_parts_system_and_tool_history_render(client: Any) -> None:
    messages = [
        {"role": "system", "content": [{"type": "text", "text": "You are terse."}]},
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": None, "tool_calls": [{"id": "call_1", "type": "function", "function": {
            "name": "get_weather", "arguments": json.dumps({"city": "Paris", "unit": "c"})}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "18 degrees, sunny"},
    ]
    reply = client.chat.completions.create(model=MODEL, messages=messages, max_tokens=8, temperature=0)
    assert reply.choices[0].finish_reason in ("stop", "length")


def test_stop_and_max_completion_tokens(client: Any) -> None:
    reply = client.chat.completions.create(model=MODEL, messages=HELLO, max_completion_tokens=5, temperature=0)
    assert reply.usage.completion_tokens == 5 and reply.choices[0].finish_reason == "length"
    sea = [{"role": "user", "content": "Write two sentences about the sea."}]
    full = client.chat.completions.create(model=MODEL, messages=sea, max_tokens=20, temperature=0)
    word = full.choices[0].message.content.split()[2]
    stopped = client.chat.completions.create(model=MODEL, messages=sea, max_tokens=20, temperature=0, stop=[word])
    assert stopped.choices[0].finish_reason == "stop"
    assert full.choices[0].message.content.startswith(stopped.choices[0].message.content)
    assert word not in stopped.choices[0].message.content


def test_pyagent_sampler_parameters_are_extra_body_fields(client: Any) -> None:
    reply = client.chat.completions.create(
        model=MODEL, messages=HELLO, max_tokens=8, temperature=0.8, seed=3, frequency_penalty=0.5,
        presence_penalty=0.2, logit_bias={"28": -100},
        extra_body={"top_k": 20, "min_p": 0.05, "dry_multiplier": 0.8, "priority": 1, "tenant": "a"})
    assert reply.usage.completion_tokens > 0


@pytest.mark.parametrize("stream", [False, True])
def test_response_format_json_schema_validates(client: Any, stream: bool) -> None:
    schema = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 12},
                                               "age": {"type": "integer", "minimum": 0, "maximum": 120}},
              "required": ["name", "age"], "additionalProperties": False}
    kwargs = {"model": MODEL, "messages": [{"role": "user", "content": "Describe a person as JSON."}],
              "max_tokens": 60, "temperature": 0,
              "response_format": {"type": "json_schema", "json_schema": {"name": "person", "schema": schema}}}
    if stream:
        text = "".join(c.choices[0].delta.content or "" for c in client.chat.completions.create(**kwargs, stream=True)
                       if c.choices)
    else:
        text = client.chat.completions.create(**kwargs).choices[0].message.content
    jsonschema.validate(json.loads(text), schema)


def test_response_format_json_object(client: Any) -> None:
    messages = [{"role": "user", "content": "Output JSON: a person with a name and an age."}]
    reply = client.chat.completions.create(model=MODEL, messages=messages, max_tokens=100, temperature=0,
                                           response_format={"type": "json_object"})
    assert reply.choices[0].finish_reason == "stop"
    assert isinstance(json.loads(reply.choices[0].message.content), dict)


def _check_calls(calls: list[Any], allowed: dict[str, Any]) -> None:
    assert calls
    for call in calls:
        assert call.type == "function" and call.id
        jsonschema.validate(json.loads(call.function.arguments), allowed[call.function.name]["function"]["parameters"])


@pytest.mark.parametrize("choice", ["required", {"type": "function", "function": {"name": "get_time"}}])
def test_forced_tool_calls_parse_and_validate(client: Any, choice: Any) -> None:
    allowed = {"get_weather": WEATHER, "get_time": TIME} if choice == "required" else {"get_time": TIME}
    reply = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "What is the weather in Paris?"}], max_tokens=80,
        temperature=0, tools=[WEATHER, TIME], tool_choice=choice)
    message = reply.choices[0].message
    assert message.content is None
    cut = reply.usage.completion_tokens == 80  # the embedded model writes calls until max_tokens cuts one
    assert reply.choices[0].finish_reason == ("length" if cut else "tool_calls")
    _check_calls(message.tool_calls, allowed)


def test_streamed_tool_call_fragments_assemble_to_the_non_streamed_call(client: Any) -> None:
    kwargs = {"model": MODEL, "messages": [{"role": "user", "content": "Time in Tokyo?"}], "max_tokens": 80,
              "temperature": 0, "tools": [WEATHER, TIME], "tool_choice": "required", "parallel_tool_calls": False}
    plain = client.chat.completions.create(**kwargs).choices[0].message.tool_calls
    calls: dict[int, dict[str, str]] = {}
    finish = []
    for chunk in client.chat.completions.create(**kwargs, stream=True):
        for choice in chunk.choices:
            for fragment in choice.delta.tool_calls or ():
                call = calls.setdefault(fragment.index, {"name": "", "arguments": ""})
                call["name"] += fragment.function.name or ""
                call["arguments"] += fragment.function.arguments or ""
            if choice.finish_reason:
                finish.append(choice.finish_reason)
    assert finish == ["tool_calls"] and len(plain) == 1
    assert [calls[i] for i in sorted(calls)] == [{"name": c.function.name, "arguments": c.function.arguments}
                                                 for c in plain]


@pytest.mark.parametrize("choice", ["required", {"type": "function", "function": {"name": "get_weather"}}])
def test_forced_calls_end_at_the_last_call_with_parallel_calls_on(server: Server, client: Any, choice: Any) -> None:
    """As OpenAI and vLLM: the reply is calls only, content null, nothing after the last call (the raw
    tokens, from the logprobs, show it); the embedded model writes calls until max_tokens cuts one,
    which is dropped (finish_reason length); streamed, no content either."""
    kwargs = {"model": MODEL, "messages": [{"role": "user", "content": "What is the weather in Paris and Rome?"}],
              "max_tokens": 120, "temperature": 0, "tools": [WEATHER, TIME], "tool_choice": choice}
    reply = client.chat.completions.create(**kwargs, logprobs=True)
    message, raw = reply.choices[0].message, b"".join(bytes(t.bytes) for t in reply.choices[0].logprobs.content)
    call = r"<tool_call>\n\{.*?\}\n</tool_call>"
    assert re.fullmatch(rf"{call}(\n{call})*(\n<tool_call>.*)?", raw.decode(), re.DOTALL), raw
    assert message.content is None, message
    cut = reply.usage.completion_tokens == 120
    assert reply.choices[0].finish_reason == ("length" if cut else "tool_calls")
    _check_calls(message.tool_calls, {"get_weather": WEATHER, "get_time": TIME})
    events = sse_events(server, "/v1/chat/completions", {**kwargs, "stream": True})
    assert not "".join(e["choices"][0]["delta"].get("content") or "" for e in events[:-1] if e["choices"])


def test_a_malformed_tool_call_comes_back_as_content(client: Any) -> None:
    """The regex makes the model write a call whose JSON lacks a brace: the whole text is the content, as vLLM
    returns it, with no tool_calls and finish_reason stop; streamed, the content adds up to the same text."""
    text = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "unit": "c"}\n</tool_call>'
    kwargs = {"model": MODEL, "messages": [{"role": "user", "content": "Weather in Paris?"}], "max_tokens": 200,
              "temperature": 0, "tools": [WEATHER], "extra_body": {"regex": re.escape(text)}}
    reply = client.chat.completions.create(**kwargs)
    choice = reply.choices[0]
    assert choice.message.content == text and not choice.message.tool_calls and choice.finish_reason == "stop"
    content, finishes = "", []
    for chunk in client.chat.completions.create(**kwargs, stream=True):
        for streamed in chunk.choices:
            content += streamed.delta.content or ""
            finishes += [streamed.finish_reason] if streamed.finish_reason else []
    assert content == text and finishes == ["stop"]


@pytest.fixture(scope="module")
def plain_server() -> Any:
    """A server that reads no tool calls (``--tool-parser none``)."""
    from .conftest import running

    with running("--tool-parser", "none", "--served-model-name", MODEL) as started:
        yield started


@pytest.mark.parametrize("choice", ["required", {"type": "function", "function": {"name": "get_time"}}])
@pytest.mark.parametrize("stream", [False, True])
def test_forced_calls_without_a_tool_parser_are_json_read_as_calls(plain_server: Server, choice: Any,
                                                                    stream: bool) -> None:
    """As vLLM serves them without a parser: a named function's arguments, or a JSON list of calls."""
    import openai

    client = openai.OpenAI(base_url=plain_server.url + "/v1", api_key="none", max_retries=0, timeout=120)
    allowed = {"get_weather": WEATHER, "get_time": TIME} if choice == "required" else {"get_time": TIME}
    kwargs = {"model": MODEL, "messages": [{"role": "user", "content": "What time is it in Tokyo?"}],
              "max_tokens": 80, "temperature": 0, "tools": [WEATHER, TIME], "tool_choice": choice}
    if not stream:
        reply = client.chat.completions.create(**kwargs)
        assert reply.choices[0].message.content is None and reply.choices[0].finish_reason == "tool_calls"
        _check_calls(reply.choices[0].message.tool_calls, allowed)
        return
    calls: dict[int, dict[str, str]] = {}
    finishes = []
    for chunk in client.chat.completions.create(**kwargs, stream=True):
        for streamed in chunk.choices:
            assert not streamed.delta.content
            for fragment in streamed.delta.tool_calls or ():
                call = calls.setdefault(fragment.index, {"name": "", "arguments": ""})
                call["name"] += fragment.function.name or ""
                call["arguments"] += fragment.function.arguments or ""
            finishes += [streamed.finish_reason] if streamed.finish_reason else []
    assert finishes == ["tool_calls"] and calls
    for call in calls.values():
        jsonschema.validate(json.loads(call["arguments"]), allowed[call["name"]]["function"]["parameters"])


def test_auto_tools_without_a_tool_parser_are_a_400(plain_server: Server) -> None:
    body = {"messages": HELLO, "tools": [WEATHER]}
    response = plain_server.post("/v1/chat/completions", body)
    assert response.status_code == 400
    assert "reads no tool calls the model chooses to make" in response.json()["error"]["message"]


def test_a_forced_reply_cut_inside_a_call_has_no_content(server: Server, client: Any) -> None:
    """Cut at the start of its second call, a forced reply keeps its first, and shows nothing of the cut one."""
    city = {"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
    kwargs = {"model": MODEL, "messages": [{"role": "user", "content": "What is the weather in Paris?"}],
              "max_tokens": 60, "temperature": 0, "tools": [city], "tool_choice": "required"}
    reply = client.chat.completions.create(**kwargs)
    choice = reply.choices[0]
    assert choice.finish_reason == "length" and choice.message.content is None
    assert [json.loads(c.function.arguments) for c in choice.message.tool_calls] == [{"city": "Paris"}]
    events = sse_events(server, "/v1/chat/completions", {**kwargs, "stream": True})
    assert not any(e["choices"][0]["delta"].get("content") for e in events[1:-1] if e["choices"])
