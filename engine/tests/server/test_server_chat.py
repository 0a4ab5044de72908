"""Chat completions through the official ``openai`` client: streamed and not, n, usage, structured output, tools."""

from __future__ import annotations

import json
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
    assert reply.choices[0].finish_reason == "tool_calls"
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
