"""Every error case answers with its status and OpenAI's error body, never a 500 or a traceback."""

from __future__ import annotations

from typing import Any

import httpx2
import pytest

from .conftest import API_KEY, MODEL, Server

CHAT = "/v1/chat/completions"
MESSAGES = [{"role": "user", "content": "Hi"}]


def error_of(response: httpx2.Response, status: int) -> dict[str, Any]:
    """The ``error`` object of a response that must have ``status``."""
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"error"}, body
    error = body["error"]
    assert set(error) == {"message", "type", "param", "code"}, error
    assert isinstance(error["message"], str) and error["message"]
    assert "Traceback" not in error["message"]
    return dict(error)


@pytest.mark.parametrize(("path", "body", "param", "words"), [
    (CHAT, {"messages": MESSAGES, "no_such_sampler": 1}, None, "unknown sampling parameter 'no_such_sampler'"),
    (CHAT, {"messages": MESSAGES, "top_k": -3}, None, "top_k"),
    (CHAT, {"messages": MESSAGES, "logprobs": True, "top_logprobs": 21}, "top_logprobs", "less than or equal to 20"),
    (CHAT, {"messages": MESSAGES, "top_logprobs": 2}, "top_logprobs", "needs logprobs=true"),
    (CHAT, {"messages": MESSAGES, "response_format": {"type": "json_schema", "json_schema": {
        "name": "x", "schema": {"type": "no-such-type"}}}}, None, "schema"),
    (CHAT, {"messages": MESSAGES, "response_format": {"type": "json_object"}, "grammar_backend": "no-such-backend"},
     None, "no-such-backend"),
    (CHAT, {"messages": MESSAGES, "regex": "[a-z]+", "choice": ["a"]}, "choice", "one constraint"),
    (CHAT, {"messages": MESSAGES, "choice": []}, "choice", "constraint choice is empty"),
    (CHAT, {"messages": MESSAGES, "grammar": "root ::= ("}, None, "no grammar backend can serve this grammar"),
    ("/v1/completions", {"prompt": "Hi", "regex": ""}, "regex", "constraint regex is empty"),
    (CHAT, {"messages": MESSAGES, "tool_choice": "required"}, "tool_choice", "needs tools"),
    (CHAT, {"messages": MESSAGES, "tools": [{"type": "function", "function": {"name": "f", "parameters": {
        "type": 7}}}]}, "tools[0].function.parameters", "not a valid JSON schema"),
    (CHAT, {"messages": MESSAGES, "tools": [{"type": "function", "function": {"name": "f"}}],
            "tool_choice": {"type": "function", "function": {"name": "g"}}}, None, "'g'"),
    (CHAT, {"messages": [{"role": "user", "content": "word " * 9000}]}, None, "context"),
    (CHAT, {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]},
     None, "only text content parts"),
    (CHAT, {"messages": []}, "messages", "at least 1"),
    (CHAT, {}, "messages", "Field required"),
    (CHAT, {"messages": MESSAGES, "n": 0}, "n", "greater than or equal to 1"),
    (CHAT, {"messages": MESSAGES, "deadline_s": -1}, "deadline_s", "greater than 0"),
    ("/v1/completions", {"prompt": "Hi", "suffix": "!"}, "suffix", "suffix"),
    ("/v1/completions", {"prompt": "Hi", "best_of": 3}, "best_of", "best_of=3 > n=1"),
    ("/v1/completions", {"prompt": "Hi", "logprobs": 21}, "logprobs", "less than or equal to 20"),
    ("/v1/completions", {"prompt": [999999]}, "prompt", "token ids"),
    ("/v1/completions", {"prompt": ""}, "prompt", "empty"),
    ("/v1/completions", {"prompt": ["a"] * 5, "n": 64, "max_tokens": 1}, None,
     "asks for 320 requests (prompts times n) but the waiting queue holds at most 256"),
    ("/v1/completions", {"prompt": "Hi", "logit_bias": {"x": 1}}, "logit_bias", "token ids"),
    ("/detokenize", {"tokens": [-1]}, "tokens", "token ids"),
    ("/tokenize", {}, "prompt", "exactly one"),
])
def test_bad_input_is_a_400_that_says_what_was_wrong(server: Server, path: str, body: dict[str, Any],
                                                     param: str | None, words: str) -> None:
    error = error_of(server.post(path, body), 400)
    assert error["type"] == "invalid_request_error"
    assert words in error["message"], error["message"]
    if param is not None:
        assert error["param"] == param


def test_malformed_json_is_a_400(server: Server) -> None:
    response = httpx2.post(server.url + CHAT, content=b"{not json", timeout=30,
                          headers={"Authorization": f"Bearer {API_KEY}", "Content-Type": "application/json"})
    error_of(response, 400)


@pytest.mark.parametrize("key", [None, "wrong-key"])
def test_missing_or_wrong_key_is_a_401(server: Server, key: str | None) -> None:
    error = error_of(server.post(CHAT, {"messages": MESSAGES}, key=key), 401)
    assert error["code"] == "invalid_api_key"
    assert server.get("/health").status_code == 200  # health needs no key


def test_unknown_model_and_route_are_404s(server: Server) -> None:
    error = error_of(server.post(CHAT, {"model": "gpt-17", "messages": MESSAGES}), 404)
    assert error["code"] == "model_not_found" and "gpt-17" in error["message"]
    error_of(server.post("/v1/no-such-route", {}), 404)
    assert server.post(CHAT, {"model": "alias", "messages": MESSAGES, "max_tokens": 1}).status_code == 200


def test_body_over_the_limit_is_a_413(server: Server) -> None:
    error = error_of(server.post(CHAT, {"messages": [{"role": "user", "content": "x" * 2**20}]}), 413)
    assert error["code"] == "body_too_large"


def test_models_tokenize_detokenize_version(server: Server) -> None:
    models = server.get("/v1/models", headers={"Authorization": f"Bearer {API_KEY}"}).json()
    assert [m["id"] for m in models["data"]] == [MODEL, "alias"]
    tokens = server.post("/tokenize", {"prompt": "Hello world"}).json()
    assert tokens["count"] == len(tokens["tokens"]) and tokens["max_model_len"] > 0
    assert server.post("/detokenize", {"tokens": tokens["tokens"]}).json() == {"prompt": "Hello world",
                                                                              "content": "Hello world"}
    chat = server.post("/tokenize", {"messages": MESSAGES}).json()
    reply = server.post(CHAT, {"messages": MESSAGES, "max_tokens": 1}).json()
    assert chat["count"] == reply["usage"]["prompt_tokens"]
    assert set(server.get("/version").json()) == {"version", "pyagent_core"}
