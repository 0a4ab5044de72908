"""The async engine front: disconnects free blocks, a full queue answers 503, SIGTERM drains; reasoning split."""

from __future__ import annotations

import contextlib
import json
import re
import signal
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx2

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
