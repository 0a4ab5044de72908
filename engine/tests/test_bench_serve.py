"""`pyagent bench serve`'s load generator against a real local streaming server that emits known chunks.

The reference server (stdlib ``http.server`` on 127.0.0.1) streams OpenAI-style chat chunks: a role
chunk, ``max_tokens`` one-token text chunks with an empty one among them, a finish chunk, a usage chunk
and ``[DONE]``. It records how many requests it served at once. Statistics are checked against
``statistics.quantiles`` on the generator's own records; no timing is asserted.
"""

from __future__ import annotations

import itertools
import json
import statistics
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from pyagent_engine.benchmarks.serve import (
    ServeBenchError,
    ServeBenchSettings,
    load_prompts,
    percentile_ms,
    ratios,
    run_level,
    served_model,
)
from pyagent_engine.benchmarks.shared_data import SHARED_DATA


class ReferenceServer(ThreadingHTTPServer):
    """Counts requests in flight; ``barrier`` (when set) holds each request until that many are in flight."""

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), ReferenceHandler)
        self.lock = threading.Lock()
        self.in_flight = self.most_in_flight = self.served = 0
        self.barrier: threading.Barrier | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class ReferenceHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.0"  # the body ends when the connection closes
    server: ReferenceServer

    def log_message(self, format: str, *args: object) -> None:
        pass

    def _json(self, status: int, payload: dict) -> None:
        body = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        if self.path == "/v1/models":
            self._json(200, {"object": "list", "data": [{"id": "reference", "object": "model"}]})
        else:
            self._json(200 if self.path == "/health" else 404, {})

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        prompt = body["messages"][0]["content"]
        if "FAIL" in prompt or not body.get("ignore_eos"):
            self._json(400, {"error": {"message": "refused", "type": "invalid_request_error"}})
            return
        server = self.server
        with server.lock:
            server.in_flight += 1
            server.most_in_flight = max(server.most_in_flight, server.in_flight)
        try:
            if server.barrier is not None:
                server.barrier.wait(timeout=30)
            self._stream(body["max_tokens"], len(prompt.split()))
        finally:
            with server.lock:
                server.in_flight -= 1
                server.served += 1

    def _stream(self, tokens: int, prompt_tokens: int) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        chunks = [{"choices": [{"index": 0, "delta": {"role": "assistant"}}]}]
        for i in range(tokens):
            chunks.append({"choices": [{"index": 0, "delta": {"content": f"t{i} "}}]})
            if i == 0:
                chunks.append({"choices": [{"index": 0, "delta": {"content": ""}}]})
        chunks.append({"choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]})
        chunks.append({"choices": [], "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": tokens}})
        for chunk in chunks:
            self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
            self.wfile.flush()
        self.wfile.write(b"data: [DONE]\n\n")


@pytest.fixture
def reference() -> Iterator[ReferenceServer]:
    server = ReferenceServer()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


PROMPTS = [f"question number {i} about {topic}" for i, topic in enumerate(("tides", "bread", "orbits", "moss"))]


def reference_percentile_ms(values: list[float], q: int) -> float:
    """statistics.quantiles' inclusive method: the same linear interpolation as numpy's default."""
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1] * 1e3


def test_closed_loop_keeps_the_concurrency_and_counts_what_the_server_sent(reference):
    settings = ServeBenchSettings(concurrency=(4,), max_tokens=5, rounds=3, min_requests=1)
    reference.barrier = threading.Barrier(4)  # a client that does not keep 4 requests open stalls here
    summary, records = run_level(reference.url, served_model(reference.url), PROMPTS, 4, settings)
    reference.barrier = None
    assert reference.most_in_flight == 4 and reference.served == 12
    assert (summary["requests"], summary["failed"], summary["output_tokens"]) == (12, 0, 60)
    assert all(len(r.chunk_times) == 5 for r in records), "the empty chunk is not a token"
    assert summary["mean_prompt_tokens"] == statistics.mean(len(p.split()) for p in PROMPTS)
    ttft = [r.chunk_times[0] - r.start for r in records]
    itl = [b - a for r in records for a, b in itertools.pairwise(r.chunk_times)]
    assert len(itl) == 12 * 4
    for q in (50, 99):
        assert summary[f"ttft_p{q}_ms"] == pytest.approx(reference_percentile_ms(ttft, q), rel=1e-9)
        assert summary[f"itl_p{q}_ms"] == pytest.approx(reference_percentile_ms(itl, q), rel=1e-9)
    assert summary["output_tok_s"] == pytest.approx(60 / summary["wall_s"])


def test_a_refused_request_fails_alone(reference):
    settings = ServeBenchSettings(concurrency=(2,), max_tokens=3, rounds=2, min_requests=1)
    summary, _ = run_level(reference.url, "reference", [*PROMPTS[:3], "FAIL this one"], 2, settings)
    assert (summary["requests"], summary["failed"], summary["output_tokens"]) == (4, 1, 9)
    assert summary["errors"] and summary["errors"][0].startswith("HTTP 400")


def test_percentiles_of_nothing_and_ratios_with_a_side_missing():
    assert percentile_ms([], 50) is None
    assert percentile_ms([0.001, 0.003], 50) == pytest.approx(2.0)
    levels = [{"concurrency": 32, "results": {"pyagent": {"output_tok_s": 300.0, "ttft_p50_ms": 50.0},
                                              "llama-server": {"output_tok_s": 100.0, "ttft_p50_ms": 100.0},
                                              "offline": {"output_tok_s": 400.0}}}]
    rows = {r["name"]: r for r in ratios(levels)}
    assert rows["output tok/s @32: pyagent / llama-server"] == {
        "name": "output tok/s @32: pyagent / llama-server", "ratio": 3.0, "goal": 2.0, "met": True}
    assert rows["output tok/s @32: pyagent / offline"]["ratio"] == 0.75
    assert rows["output tok/s @32: pyagent / offline"]["met"] is False
    assert rows["TTFT p50 @32: llama-server / pyagent (>1: pyagent faster)"]["ratio"] == 2.0


def test_unreachable_server_and_bad_settings_say_what_is_wrong():
    with pytest.raises(ServeBenchError, match="did not list its models"):
        served_model("http://127.0.0.1:9")
    with pytest.raises(ServeBenchError, match="unknown endpoint 'embeddings'"):
        ServeBenchSettings(endpoint="embeddings")


@pytest.mark.skipif(not (SHARED_DATA / "specbench").is_dir(), reason="../shared/data/specbench is absent")
def test_cli_measures_a_running_server_as_the_peer(reference, cli):
    prompts = load_prompts()
    assert len(prompts) > 64 and all(len(p) <= 600 for p in prompts)
    result = cli("bench", "serve", "--url", reference.url, "--peer-url", reference.url, "--peer-name", "twin",
                 "--no-offline", "--concurrency", "1,2", "--max-tokens", "3", "--rounds", "1", "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert [level["concurrency"] for level in report["levels"]] == [1, 2]
    for level in report["levels"]:
        assert set(level["results"]) == {"pyagent", "twin"}
        assert all(r["failed"] == 0 and r["output_tokens"] == 3 * r["requests"] for r in level["results"].values())
    assert any(r["name"] == "output tok/s @2: pyagent / twin" and r["ratio"] for r in report["ratios"])


CHILD_SERVER = """
import http.server, os, sys
open(sys.argv[2], "w").write(str(os.getpid()))
class Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.end_headers()
http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), Health).serve_forever()
"""

BENCH_PARENT = """
import sys, time
from pyagent_engine.benchmarks.serve import free_port, running_server
port = free_port()
with running_server("child", [sys.executable, "-c", sys.argv[1], str(port), sys.argv[2]], port):
    print("ready", flush=True)
    time.sleep(60)
"""


def test_a_terminated_benchmark_stops_the_server_it_started(tmp_path):
    """Fails when SIGTERM kills the benchmark outright: the server it started lives on, orphaned."""
    import os
    import signal
    import subprocess
    import sys

    pid_file = tmp_path / "child.pid"
    parent = subprocess.Popen([sys.executable, "-c", BENCH_PARENT, CHILD_SERVER, str(pid_file)],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert parent.stdout is not None and parent.stdout.readline().strip() == "ready"
        parent.send_signal(signal.SIGTERM)
        status = parent.wait(timeout=60)
    finally:
        if parent.poll() is None:
            parent.kill()
        child = int(pid_file.read_text()) if pid_file.exists() else None
        try:
            if child is not None:
                os.kill(child, signal.SIGKILL)  # still there: it outlived the benchmark
                pytest.fail("the child server outlived the benchmark")
        except ProcessLookupError:
            pass
    assert status == 128 + signal.SIGTERM
