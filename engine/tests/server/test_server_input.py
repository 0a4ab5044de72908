"""What a client sends that is not quite right: text that is not Unicode, bodies that are not JSON, nulls,
OpenAI's every request field, llama-server's tokenizer bodies, prompts that leave no room for max_tokens.

Bodies are sent as raw bytes where the test needs them exact (a lone surrogate is the JSON escape
``\\ud800``; undecodable and CESU-8 bytes are written into the body as they are).
"""

from __future__ import annotations

import json
from typing import Any

import httpx2
import pytest
from openai.types import completion_create_params
from openai.types.chat import completion_create_params as chat_create_params

from .conftest import API_KEY, MODEL, Server
from .test_server_errors import CHAT, MESSAGES, error_of

HEADERS = {"Authorization": f"Bearer {API_KEY}", "Content-Type": "application/json"}
WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}


def post_raw(server: Server, path: str, data: bytes, headers: dict[str, str] | None = None) -> httpx2.Response:
    """POST ``data`` as it is."""
    return httpx2.post(server.url + path, content=data, headers=headers or HEADERS, timeout=120)


def escaped(body: dict[str, Any]) -> bytes:
    """``body`` as JSON with every non-ASCII character escaped (so a lone surrogate is ``\\ud800``)."""
    return json.dumps(body).encode("ascii")


@pytest.mark.parametrize(("path", "body", "param"), [
    (CHAT, {"messages": [{"role": "user", "content": "\ud800"}]}, "messages[0].content"),
    (CHAT, {"messages": [{"role": "system", "content": "be \udfff brief"}, *MESSAGES]}, "messages[0].content"),
    (CHAT, {"messages": [{"role": "user", "content": "x \ud800"}], "stream": True}, "messages[0].content"),
    (CHAT, {"messages": [{"role": "user", "content": [{"type": "text", "text": "a\ud83d"}]}]},
     "messages[0].content[0].text"),
    (CHAT, {"messages": MESSAGES, "regex": "[a\ud800]+"}, "regex"),
    (CHAT, {"messages": MESSAGES, "choice": ["yes", "n\udc00o"]}, "choice[1]"),
    (CHAT, {"messages": MESSAGES, "tools": [{"type": "function", "function": {"name": "f", "parameters": {
        "type": "object", "properties": {"a": {"type": "string", "pattern": "\ud800"}}}}}], "tool_choice": "required"},
     "tools[0].function.parameters.properties.a.pattern"),
    ("/v1/completions", {"prompt": "caf\udce9"}, "prompt"),
    ("/v1/completions", {"prompt": ["fine", "\ud800"], "stream": True}, "prompt[1]"),
    ("/tokenize", {"prompt": "\ud800"}, "prompt"),
    ("/tokenize", {"messages": [{"role": "user", "content": "\ud800"}]}, "messages[0].content"),
    ("/tokenize", {"content": "\ud800"}, "content"),
])
def test_a_lone_surrogate_in_any_text_is_a_400_naming_the_field(server: Server, path: str, body: dict[str, Any],
                                                                 param: str) -> None:
    error = error_of(post_raw(server, path, escaped(body)), 400)
    assert error["param"] == param and "lone surrogate" in error["message"], error
    assert error["message"].startswith(param + ": ")
    assert "Traceback" not in server.log_text()


@pytest.mark.parametrize(("raw", "byte"), [
    (b'{"messages": [{"role": "user", "content": "caf\xe9"}]}', "0xe9"),
    (b'{"messages": [{"role": "user", "content": "\xed\xa0\x80\xed\xb0\x80"}]}', "0xed"),  # CESU-8 of U+10000
    (b'{"prompt": "\xff"}', "0xff"),
])
def test_bytes_that_are_not_utf8_are_a_400_saying_where(server: Server, raw: bytes, byte: str) -> None:
    path = CHAT if b"messages" in raw else "/v1/completions"
    error = error_of(post_raw(server, path, raw), 400)
    offset = raw.index(bytes([int(byte, 16)]))
    assert error["message"] == (f"the request body is not UTF-8 (byte {byte} at offset {offset}); "
                                "send JSON encoded as UTF-8"), error


def test_malformed_json_says_so_and_where_without_a_numeric_param(server: Server) -> None:
    body = b'{"messages": [{"role": "user", "content": "Hi"}] "max_tokens": 2}'
    error = error_of(post_raw(server, CHAT, body), 400)
    assert error["message"] == ("the request body is not JSON: Expecting ',' delimiter at line 1, column 50 "
                                "(character 49); send one JSON object")
    assert error["param"] is None


def test_without_the_key_a_malformed_body_is_a_401(server: Server) -> None:
    for data in (b"{not json", b'{"prompt": "\xe9"}', escaped({"prompt": "\ud800"}), escaped({"prompt": 3})):
        response = post_raw(server, "/v1/completions", data, {"Content-Type": "application/json"})
        assert error_of(response, 401)["code"] == "invalid_api_key"


def test_a_chunked_body_over_the_limit_is_a_413(server: Server) -> None:
    """No Content-Length: the limit applies as the body arrives."""
    chunk = b"x" * 65536
    body = [b'{"prompt": "', *[chunk] * 20, b'"}']  # 1.25 MiB, over the server's 1 MiB

    def chunks() -> Any:
        yield from body

    response = httpx2.post(server.url + "/v1/completions", content=chunks(), headers=HEADERS, timeout=120)
    assert "content-length" not in response.request.headers
    assert error_of(response, 413)["code"] == "body_too_large"


def test_null_fields_take_their_defaults(server: Server) -> None:
    body = {"messages": MESSAGES, "max_tokens": 2, "n": None, "stream": None, "stop": None, "temperature": None,
            "top_k": None, "logprobs": None, "parallel_tool_calls": None}
    reply = server.post(CHAT, body)
    assert reply.status_code == 200, reply.text
    assert len(reply.json()["choices"]) == 1


@pytest.mark.parametrize("message", [{"role": "user"}, {"role": "user", "content": None}, {"role": "system"},
                                     {"role": "tool", "tool_call_id": "c1"}, {"role": "assistant"}])
def test_a_message_without_content_is_a_400(server: Server, message: dict[str, Any]) -> None:
    error = error_of(server.post(CHAT, {"messages": [message]}), 400)
    assert error["param"] == "messages.0" and f"a {message['role']} message needs content" in error["message"]


def test_an_assistant_message_with_tool_calls_needs_no_content(server: Server) -> None:
    messages = [*MESSAGES, {"role": "assistant", "tool_calls": [{"id": "c1", "type": "function", "function": {
        "name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]}, {"role": "tool", "tool_call_id": "c1",
                                                                         "content": "sunny"}]
    assert server.post(CHAT, {"messages": messages, "max_tokens": 1}).status_code == 200


def test_prompt_and_max_tokens_beyond_the_context_is_a_400(server: Server) -> None:
    prompt = "word " * 8000
    count = server.post("/tokenize", {"prompt": prompt}).json()["count"]
    error = error_of(server.post("/v1/completions", {"prompt": prompt, "max_tokens": 1000}), 400)
    assert error["message"] == (f"the prompt has {count} tokens and max_tokens is 1000: {count + 1000} tokens, over "
                                f"the model's context of 8192; lower max_tokens to at most {8192 - count} or shorten "
                                "the prompt")
    chat = server.post(CHAT, {"messages": [{"role": "user", "content": prompt}], "max_completion_tokens": 1000})
    assert "over the model's context of 8192" in error_of(chat, 400)["message"]
    with httpx2.stream("POST", server.url + "/v1/completions", headers=HEADERS, timeout=120, json={
            "prompt": prompt, "max_tokens": 8192 - count, "stream": True}) as fits:  # exactly the rest: accepted
        assert fits.status_code == 200, fits.read()


# A value for every field of OpenAI's request schemas (the installed openai package's), and what the
# server makes of it: None, accepted; a text, the 400 it answers, whose message says why.
CHAT_FIELDS: dict[str, tuple[Any, str | None]] = {
    "messages": (MESSAGES, None), "model": (MODEL, None), "audio": ({"voice": "alloy", "format": "wav"},
                                                                     "generates text only"),
    "frequency_penalty": (0.1, None), "function_call": ({"name": "get_weather"}, None),
    "functions": ([WEATHER["function"]], None), "logit_bias": ({"28": -100}, None), "logprobs": (True, None),
    "max_completion_tokens": (2, None), "max_tokens": (2, None), "metadata": ({"team": "a"}, None),
    "modalities": (["text"], None), "moderation": ({"input": {"mode": "score"}}, None), "n": (1, None),
    "parallel_tool_calls": (False, None), "prediction": ({"type": "content", "content": "Hello"}, None),
    "presence_penalty": (0.1, None), "prompt_cache_key": ("user-7", None),
    "prompt_cache_options": ({"mode": "implicit"}, None), "prompt_cache_retention": ("24h", None),
    "reasoning_effort": ("low", None), "response_format": ({"type": "text"}, None),
    "safety_identifier": ("user-7", None), "seed": (3, None), "service_tier": ("auto", None), "stop": (["\n\n"], None),
    "store": (False, None), "stream_options": ({"include_usage": True}, None), "temperature": (0.0, None),
    "tool_choice": ("none", None), "tools": ([WEATHER], None), "top_logprobs": (2, None), "top_p": (0.9, None),
    "user": ("user-7", None), "verbosity": ("low", None),
    "web_search_options": ({"search_context_size": "low"}, "cannot search the web"),
}
COMPLETION_FIELDS: dict[str, tuple[Any, str | None]] = {
    "model": (MODEL, None), "prompt": ("Hi", None), "best_of": (1, None), "echo": (True, None),
    "frequency_penalty": (0.1, None), "logit_bias": ({"28": -100}, None), "logprobs": (2, None),
    "max_tokens": (2, None), "n": (1, None), "presence_penalty": (0.1, None), "seed": (3, None), "stop": ("\n\n", None),
    "stream_options": ({"include_usage": True}, None), "suffix": ("!", "suffix (fill-in-the-middle) is not supported"),
    "temperature": (0.0, None), "top_p": (0.9, None), "user": ("user-7", None),
}


NEEDS = {"function_call": {"functions": [WEATHER["function"]]}, "top_logprobs": {"logprobs": True}}
"""The fields a chat field needs beside it."""


def test_the_tables_cover_every_field_of_openais_request_schemas() -> None:
    """A field a new openai release adds fails here until the server knows it (and docs/server.md lists it)."""
    assert set(CHAT_FIELDS) == set(chat_create_params.CompletionCreateParamsBase.__annotations__)
    assert set(COMPLETION_FIELDS) == set(completion_create_params.CompletionCreateParamsBase.__annotations__)


@pytest.mark.parametrize(("field", "value", "refusal"), [(k, *v) for k, v in CHAT_FIELDS.items()
                                                          if k not in ("messages", "model")])
def test_every_openai_chat_field_is_accepted_or_refused_for_what_it_asks(client: Any, field: str, value: Any,
                                                                       refusal: str | None) -> None:
    import openai

    kwargs = {"model": MODEL, "messages": MESSAGES, "max_tokens": 2, **NEEDS.get(field, {}), field: value}
    if field == "max_completion_tokens":
        del kwargs["max_tokens"]
    if refusal is None:
        reply = client.chat.completions.create(**kwargs)
        assert reply.choices and reply.usage.completion_tokens >= 0
        return
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(**kwargs)
    assert refusal in caught.value.body["message"] and caught.value.body["param"] == field
    assert client.chat.completions.create(**{**kwargs, field: None}).choices  # null: not asked for


@pytest.mark.parametrize(("field", "value", "refusal"), [(k, *v) for k, v in COMPLETION_FIELDS.items()
                                                          if k not in ("prompt", "model")])
def test_every_openai_completion_field_is_accepted_or_refused_for_what_it_asks(
        client: Any, field: str, value: Any, refusal: str | None) -> None:
    import openai

    kwargs = {"model": MODEL, "prompt": "Hi", "max_tokens": 2, field: value}
    if refusal is None:
        assert client.completions.create(**kwargs).choices
        return
    with pytest.raises(openai.BadRequestError) as caught:
        client.completions.create(**kwargs)
    assert refusal in caught.value.body["message"] and caught.value.body["param"] == field


def test_a_truly_unknown_field_is_still_a_400(server: Server) -> None:
    error = error_of(server.post(CHAT, {"messages": MESSAGES, "store_completion": True}), 400)
    assert "unknown sampling parameter 'store_completion'" in error["message"]


def test_tokenize_and_detokenize_take_vllms_and_llama_servers_bodies(server: Server) -> None:
    text = "Hello <|im_start|> caf\u00e9"
    vllm = server.post("/tokenize", {"prompt": text, "return_token_strs": True}).json()
    llama = server.post("/tokenize", {"content": text}).json()  # llama-server: no BOS by default
    assert llama["tokens"] == vllm["tokens"] and vllm["count"] == len(vllm["tokens"])
    assert len(vllm["token_strs"]) == vllm["count"] and vllm["token_strs"][2] == "<|im_start|>"
    plain = server.post("/tokenize", {"content": text, "parse_special": False}).json()["tokens"]
    assert 1 not in plain and len(plain) > len(llama["tokens"])  # <|im_start|> (id 1) spelled out as text
    pieces = server.post("/tokenize", {"content": text, "with_pieces": True}).json()["tokens"]
    assert [p["id"] for p in pieces] == llama["tokens"]
    assert "".join(p["piece"] if isinstance(p["piece"], str) else bytes(p["piece"]).decode("latin-1")
                   for p in pieces) == "Hello <|im_start|> café"
    back = server.post("/detokenize", {"tokens": llama["tokens"]}).json()
    assert back == {"prompt": text, "content": text}
    error = error_of(server.post("/tokenize", {"prompt": "a", "content": "b"}), 400)
    assert "exactly one of prompt or messages (vLLM's body) or content (llama-server's)" in error["message"]


def test_pieces_that_are_not_utf8_come_as_bytes(server: Server) -> None:
    pieces = server.post("/tokenize", {"content": "\U0001f600", "with_pieces": True}).json()["tokens"]
    raw = b"".join(p["piece"].encode() if isinstance(p["piece"], str) else bytes(p["piece"]) for p in pieces)
    assert raw == "\U0001f600".encode() and any(isinstance(p["piece"], list) for p in pieces)
