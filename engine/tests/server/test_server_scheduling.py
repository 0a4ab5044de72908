"""The scheduling fields of a request body reach the engine's scheduling policy; bad ones are 400s."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from .conftest import Server, running
from .test_server_errors import CHAT, MESSAGES, error_of


@pytest.mark.parametrize(("fields", "param", "words"), [
    ({"priority": 1.5}, "priority", "valid integer"),
    ({"priority": "high"}, "priority", "valid integer"),
    ({"tenant": ""}, "tenant", "at least 1 character"),
    ({"tenant": 7}, "tenant", "valid string"),
])
def test_bad_scheduling_fields_are_400s(server: Server, fields: dict[str, Any], param: str, words: str) -> None:
    error = error_of(server.post(CHAT, {"messages": MESSAGES, **fields}), 400)
    assert error["type"] == "invalid_request_error" and error["param"] == param
    assert words in error["message"], error["message"]


def wait_for(server: Server, **load: int) -> dict[str, object]:
    """Poll ``/health`` until it shows ``load`` (running and waiting counts); the health body."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        health = server.health()
        if all(health[key] == value for key, value in load.items()):
            return health
        time.sleep(0.02)
    raise AssertionError(f"the server never showed {load}: {server.health()}")


def test_priority_orders_the_waiting_requests_of_a_priority_server() -> None:
    """One sequence at a time: while a long request runs, a low-priority request and then a
    high-priority one wait; the priority policy admits the high one first (fcfs would not)."""
    finished: list[str] = []

    def send(server: Server, name: str, priority: int, max_tokens: int) -> None:
        response = server.post("/v1/completions", {"prompt": "Count to ten:", "max_tokens": max_tokens,
                                                    "ignore_eos": True, "priority": priority}, key=None)
        assert response.status_code == 200, response.text
        finished.append(name)

    with running("--scheduler", "priority", "--max-num-seqs", "1") as server:
        threads = []
        for name, priority, max_tokens, load in [("long", 5, 400, {"running": 1}),
                                                  ("low", 5, 1, {"running": 1, "waiting": 1}),
                                                  ("high", 0, 1, {"running": 1, "waiting": 2})]:
            threads.append(threading.Thread(target=send, args=(server, name, priority, max_tokens)))
            threads[-1].start()
            wait_for(server, **load)
        for thread in threads:
            thread.join(120)
    assert finished == ["long", "high", "low"]
