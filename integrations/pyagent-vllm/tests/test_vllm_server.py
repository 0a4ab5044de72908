"""vLLM's OpenAI server with pyagent-vllm installed: pyagent's parsers are there by name, a pyagent
parameter in ``vllm_xargs`` works, and a bad one is an HTTP 400 that names it."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("vllm")

STARTUP_S = 900


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def post(url: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    request = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=300) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


@pytest.fixture(scope="module")
def server(model_dir: Path, server_flags: list[str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``python -m vllm.entrypoints.openai.api_server`` on the model, with pyagent's parsers selected
    by name (the server refuses to start with a parser that is not registered)."""
    port = free_port()
    log = tmp_path_factory.mktemp("server") / "server.log"
    command = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(model_dir),
               "--host", "127.0.0.1", "--port", str(port), *server_flags,
               "--served-model-name", "smollm2", "--enable-auto-tool-choice",
               "--tool-call-parser", "pyagent-hermes", "--reasoning-parser", "pyagent-qwen3"]
    with log.open("w") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT,
                                   env={**os.environ, "VLLM_ENABLE_V1_MULTIPROCESSING": "0"})
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + STARTUP_S
        while True:
            if process.poll() is not None:
                pytest.fail(f"the server exited ({process.returncode}):\n{log.read_text()[-4000:]}")
            try:
                with urllib.request.urlopen(base + "/health", timeout=5):
                    break
            except OSError:
                if time.monotonic() > deadline:
                    pytest.fail(f"the server did not start in {STARTUP_S} s:\n{log.read_text()[-4000:]}")
                time.sleep(2)
        yield base
    finally:
        process.terminate()
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()


def test_a_bad_pyagent_parameter_is_http_400_naming_it(server: str) -> None:
    status, body = post(server + "/v1/completions", {"model": "smollm2", "prompt": "Hello", "max_tokens": 2,
                                                     "vllm_xargs": {"no_repeat_ngram_size": -3}})
    assert status == 400, body
    assert "no_repeat_ngram_size" in json.dumps(body)


def test_a_good_pyagent_parameter_is_served(server: str) -> None:
    request = {"model": "smollm2", "prompt": "1, 2, 1, 2, 1, 2,", "max_tokens": 8, "temperature": 0}
    status, plain = post(server + "/v1/completions", request)
    assert status == 200, plain
    status, banned = post(server + "/v1/completions", {**request, "vllm_xargs": {"no_repeat_ngram_size": 2}})
    assert status == 200, banned
    assert banned["choices"][0]["text"] != plain["choices"][0]["text"]
