"""The async engine front: disconnects free blocks, a full queue answers 503, SIGTERM drains; reasoning split."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import signal
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx2
import pytest

from pyagent_engine.api.llm import LLM
from pyagent_engine.requests.params import SamplingParams

from .conftest import API_KEY, Server, running
from .test_server_errors import error_of

LONG = {"prompt": "Count slowly:", "max_tokens": 3000, "ignore_eos": True, "temperature": 0}


def wait_for(server: Server, condition: Any, what: str, timeout: float = 30.0) -> dict[str, Any]:
    """Poll ``/health`` until ``condition(body)`` holds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        body = server.health()
        if condition(body):
            return body
        time.sleep(0.02)
    raise AssertionError(f"{what} did not happen within {timeout} s: {server.health()}")


@contextlib.contextmanager
def open_stream(server: Server, body: dict[str, Any], key: str | None = None) -> Iterator[Iterator[str]]:
    """A streamed completion, admitted, whose events arrive as read; the connection closes with the block."""
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    with httpx2.stream("POST", server.url + "/v1/completions", json={**body, "stream": True}, headers=headers,
                       timeout=120) as response:
        assert response.status_code == 200, response.read()
        yield (line for line in response.iter_lines() if line)


def test_client_that_disconnects_frees_its_blocks_and_the_next_requests_are_unaffected(
        server: Server, client: Any, llm: LLM) -> None:
    total = server.health()["kv_blocks_total"]
    with open_stream(server, LONG, API_KEY) as events:
        for _ in range(5):
            next(events)
        busy = server.health()
        assert busy["running"] == 1 and busy["kv_blocks_free"] < total
    # the client went away mid-stream
    wait_for(server, lambda h: h["running"] == 0 and h["waiting"] == 0 and h["kv_blocks_free"] == total,
             "freeing the aborted request's blocks")
    [expected] = llm.generate(["The sky is"], SamplingParams(max_tokens=8, temperature=0))
    reply = client.completions.create(model="smol", prompt="The sky is", max_tokens=8, temperature=0)
    assert reply.choices[0].text == expected.text


def test_non_streamed_request_whose_client_goes_away_is_aborted(server: Server) -> None:
    total = server.health()["kv_blocks_total"]
    with contextlib.suppress(httpx2.TimeoutException):  # the client gives up and closes the connection
        server.post("/v1/completions", LONG, timeout=1.5)
    wait_for(server, lambda h: h["running"] == 0 and h["waiting"] == 0 and h["kv_blocks_free"] == total,
             "aborting the request of the client that went away", timeout=10)  # far less than 3000 tokens take


def test_reasoning_parser_detected_from_the_template_splits_reasoning(small_server: Server) -> None:
    body = {"messages": [{"role": "user", "content": "Think, then answer: what is red?"}], "temperature": 0,
            "max_tokens": 60, "regex": "[A-Za-z ,.]{5,30}</think>[A-Za-z ,.]{5,30}"}
    message = small_server.post("/v1/chat/completions", body).json()["choices"][0]["message"]
    reasoning, content = message["reasoning_content"], message["content"]
    assert re.fullmatch("[A-Za-z ,.]{5,30}", reasoning) and re.fullmatch("[A-Za-z ,.]{5,30}", content), message
    streamed = {"reasoning_content": "", "content": ""}
    response = small_server.post("/v1/chat/completions", {**body, "stream": True})
    for block in response.text.split("\n\n"):
        data = block.removeprefix("data: ")
        if data.strip() and data != "[DONE]":
            for choice in json.loads(data)["choices"]:
                for field in streamed:
                    streamed[field] += choice["delta"].get(field) or ""
    assert streamed == {"reasoning_content": reasoning, "content": content}


def test_full_waiting_queue_is_a_503(small_server: Server) -> None:
    with open_stream(small_server, LONG), open_stream(small_server, LONG):
        wait_for(small_server, lambda h: h["running"] == 1 and h["waiting"] == 1, "one running, one waiting")
        error = error_of(small_server.post("/v1/completions", {"prompt": "Hi", "max_tokens": 2}), 503)
        assert error["code"] == "overloaded" and "waiting queue is full" in error["message"]
    wait_for(small_server, lambda h: h["running"] == 0 and h["waiting"] == 0, "both aborted")


def test_sigterm_lets_running_requests_finish_then_exits_cleanly() -> None:
    with running("--shutdown-grace", "60") as server:
        results: list[list[str]] = [[], []]
        started = threading.Barrier(3)

        def read(slot: list[str]) -> None:
            with open_stream(server, {"prompt": "Tell me a story:", "max_tokens": 40, "ignore_eos": True,
                                      "temperature": 0}) as events:
                slot.append(next(events))
                started.wait()
                slot.extend(events)

        threads = [threading.Thread(target=read, args=(slot,)) for slot in results]
        for thread in threads:
            thread.start()
        started.wait()
        # uvicorn raises the signal again once it has shut down, as a process stopped by SIGTERM should
        assert server.stop() in (0, -signal.SIGTERM)
        for thread in threads:
            thread.join(60)
        for events in results:
            assert events[-1] == "data: [DONE]"
            finishes = [json.loads(e.removeprefix("data: "))["choices"][0]["finish_reason"] for e in events[:-1]]
            assert finishes[-1] == "length" and finishes.count(None) == len(finishes) - 1
        assert "Traceback" not in server.log_text()


def test_sigterm_aborts_what_runs_past_the_grace_period() -> None:
    with running("--shutdown-grace", "1") as server, open_stream(server, LONG) as events:
        first = next(events)
        server.process.send_signal(signal.SIGTERM)
        rest = list(events)  # ends once the grace second is over, well before 3000 tokens
        assert server.process.wait(60) in (0, -signal.SIGTERM)
    assert rest[-1] == "data: [DONE]"
    finishes = [json.loads(e.removeprefix("data: "))["choices"][0]["finish_reason"] for e in [first, *rest[:-1]]]
    assert finishes[-1] == "abort" and finishes.count(None) == len(finishes) - 1
    assert "Traceback" not in server.log_text()


def test_health_answers_503_draining_while_a_shutdown_drains() -> None:
    """After SIGTERM the socket stays open while requests finish: /health says draining, new work gets a 503."""
    with running("--shutdown-grace", "120") as server:
        with open_stream(server, LONG) as events:
            next(events)
            server.process.send_signal(signal.SIGTERM)
            health = wait_for_status(server, 503)
            assert health["status"] == "draining" and health["running"] == 1
            error = error_of(server.post("/v1/completions", {"prompt": "Hi", "max_tokens": 2}), 503)
            assert "shutting down" in error["message"]
        # the stream closed: its request is aborted, nothing is left to drain and the server exits
        assert server.process.wait(60) in (0, -signal.SIGTERM)
    assert "Traceback" not in server.log_text()


def wait_for_status(server: Server, status: int, timeout: float = 30.0) -> dict[str, Any]:
    """Poll ``/health`` (a refused connection fails the test) until it answers ``status``; its body."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        response = server.get("/health")
        if response.status_code == status:
            return dict(response.json())
        time.sleep(0.02)
    raise AssertionError(f"/health did not answer {status} within {timeout} s")


def test_metrics_are_labelled_with_the_served_model_name(server: Server) -> None:
    """vLLM's model_name label: the first --served-model-name, never the model file's path."""
    text = server.get("/metrics").text
    labels = set(re.findall(r'model_name="([^"]*)"', text))
    assert labels == {"smol"}, labels


class HeldTokenizer:
    """The model's tokenizer, which holds a large text's tokens until :attr:`released` (at most a minute)."""

    LARGE = 500_000

    def __init__(self, tokenizer: Any, events: list[str]) -> None:
        self.tokenizer = tokenizer
        self.events = events
        self.entered = threading.Event()
        self.released = threading.Event()

    def encode(self, text: str, **kwargs: Any) -> list[int]:
        ids = self.tokenizer.encode(text, **kwargs)
        if len(text) > self.LARGE:
            self.entered.set()
            self.released.wait(60)
            self.events.append("rendered")
        return list(ids)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.tokenizer, name)


@pytest.mark.parametrize(("path", "body"), [
    ("/tokenize", {"messages": [{"role": "user", "content": "word " * 200_000}]}),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "word " * 200_000}], "stop": [""]}),
    ("/v1/completions", {"prompt": "word " * 200_000, "stop": [""]}),
])
def test_health_answers_while_a_large_prompt_is_rendered(llm: LLM, path: str, body: dict[str, Any]) -> None:
    """The chat template and the tokenizer run off the event loop: with a 1 MB prompt's tokenization held
    until /health has answered, /health answers first (on the loop, it would wait for the render)."""
    from pyagent_engine.api.async_engine import AsyncEngine
    from pyagent_engine.server.app import build_app
    from pyagent_engine.server.state import ServerConfig, ServerState

    events: list[str] = []
    state = ServerState(AsyncEngine(llm), ServerConfig(model_names=("smol",)), llm.loaded.chat_template)
    held = HeldTokenizer(state.tokenizer, events)
    state.tokenizer = held

    async def scenario() -> tuple[httpx2.Response, httpx2.Response]:
        transport = httpx2.ASGITransport(app=build_app(state))
        async with httpx2.AsyncClient(transport=transport, base_url="http://pyagent") as client:
            large = asyncio.ensure_future(client.post(path, json=body, timeout=120))
            await asyncio.to_thread(held.entered.wait, 60)  # the large prompt is being tokenized
            health = await client.get("/health")
            events.append("health")
            held.released.set()
            return health, await large

    health, large = asyncio.run(scenario())
    assert events == ["health", "rendered"]
    assert health.status_code == 200 and large.status_code in (200, 400), large.text
