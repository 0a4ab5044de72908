"""``pyagent bench parsers``: tool-call and reasoning parsers, whole messages and streams.

Workload: the valid instances of the BFCL-derived schemas in ``jsonschemabench`` (``BFCL_*``), all
written as one parallel-call message in each format by the format's own writer (``render``). Each
installed parser is timed on

- ``extract``: the whole message at once, in µs per KB;
- ``stream``: the message fed in chunks of ``chunk_chars`` characters (about a token each) through
  ``extract_delta``, in µs per KB and per chunk;

against the peer in the same run, ``reparse``: the common way to stream with a parser that has
no incremental mode, re-running the whole-text extraction over the text so far at every chunk and
diffing (cost per chunk grows with the message). For ``hermes`` a second peer, ``regex``, is the
classic non-streaming implementation: one ``<tool_call>(.*?)</tool_call>`` regex and ``json.loads``
per match. Reasoning parsers are timed the same way on a ``<think>`` block of similar size.
"""

from __future__ import annotations

import functools
import json
import re
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import attrs

from pyagent_core.interfaces.reasoning_parser import ReasoningParserContext
from pyagent_core.interfaces.tool_parser import ToolParserContext
from pyagent_core.kinds import REASONING_PARSER, TOOL_PARSER
from pyagent_core.registry import Registry, get_registry
from pyagent_engine.benchmarks.shared_data import SHARED_DATA

DEFAULT_DATA = SHARED_DATA / "jsonschemabench"


@attrs.frozen
class ParserBenchSettings:
    """What to measure: the BFCL folder, the chunk size, repetitions (the best run counts), parsers."""

    data: Path = DEFAULT_DATA
    chunk_chars: int = 4
    repeat: int = 3
    names: tuple[str, ...] = ()


def load_bfcl(folder: Path) -> tuple[list[dict[str, Any]], list[tuple[str, dict[str, Any]]]]:
    """The tools and the valid calls of the ``BFCL_*.json`` files in ``folder``.

    Each file's schema is one tool (``{name: arguments}``) or an ``anyOf`` of them; each valid test
    instance is one call. Tools are deduplicated by name.
    """
    tools: dict[str, dict[str, Any]] = {}
    calls: list[tuple[str, dict[str, Any]]] = []
    for path in sorted(folder.glob("BFCL_*.json")):
        record = json.loads(path.read_text(encoding="utf-8"))
        schema = record["schema"]
        for branch in schema.get("anyOf", [schema]):
            for name, parameters in branch["properties"].items():
                tools[name] = {"type": "function", "function": {"name": name, "parameters": parameters}}
        for test in record.get("tests", []):
            if test.get("valid"):
                ((name, arguments),) = test["data"].items()
                calls.append((name, arguments))
    return list(tools.values()), calls


def _best(run: Callable[[], Any], repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - start)
    return best


def _chunks(text: str, size: int) -> list[str]:
    return [text[i:i + size] for i in range(0, len(text), size)]


def _stream(make: Callable[[], Any], chunks: Sequence[str]) -> Callable[[], None]:
    def run() -> None:
        parser, seen = make(), ""
        for chunk in chunks:
            parser.extract_delta(seen, chunk)
            seen += chunk
        parser.finish(seen)
    return run


def _reparse(extract: Callable[[str], Any], chunks: Sequence[str]) -> Callable[[], None]:
    def run() -> None:
        seen = ""
        for chunk in chunks:
            seen += chunk
            extract(seen)
    return run


_HERMES = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)


def regex_hermes(text: str) -> list[tuple[str, str]]:
    """The classic non-streaming hermes extraction: a regex over the text, ``json.loads`` per match."""
    calls = []
    for body in _HERMES.findall(text):
        try:
            value = json.loads(body)
        except ValueError:
            continue
        calls.append((value["name"], json.dumps(value.get("arguments", {}), ensure_ascii=False)))
    return calls


def _row(kind: str, name: str, implementation: str, text: str, chunks: Sequence[str],
         whole: float, streamed: float | None) -> dict[str, Any]:
    kb = len(text.encode("utf-8")) / 1024
    return {
        "kind": kind, "parser": name, "implementation": implementation, "kb": round(kb, 2), "chunks": len(chunks),
        "extract_us_per_kb": whole * 1e6 / kb if whole else None,
        "stream_us_per_kb": streamed * 1e6 / kb if streamed is not None else None,
        "stream_us_per_chunk": streamed * 1e6 / len(chunks) if streamed is not None else None,
    }


def _tool_rows(registry: Registry, settings: ParserBenchSettings, tools: list[dict[str, Any]],
               calls: list[tuple[str, dict[str, Any]]]) -> list[dict[str, Any]]:
    rows = []
    context = ToolParserContext(tools=tools)
    for backend in registry.backends(TOOL_PARSER):
        if settings.names and backend.name not in settings.names:
            continue
        cls = registry.load(backend)
        options = {key: spec.default for key, spec in backend.spec.options.items()}
        probe = cls(options, context)
        render = getattr(probe, "render", None)
        if render is None:
            continue
        text = render(calls)
        found = len(probe.extract(text).tool_calls)
        if found != len(calls):
            raise RuntimeError(f"{backend.name} found {found} of the {len(calls)} calls it wrote; not benchmarking it")
        chunks = _chunks(text, settings.chunk_chars)
        make = functools.partial(cls, options, context)
        whole = _best(lambda: make().extract(text), settings.repeat)  # noqa: B023 - called before the loop moves on
        streamed = _best(_stream(make, chunks), settings.repeat)
        rows.append(_row("tool_parser", backend.name, "pyagent", text, chunks, whole, streamed))
        reparse = _best(_reparse(make().extract, chunks), 1)
        rows.append(_row("tool_parser", backend.name, "reparse (peer)", text, chunks, 0.0, reparse))
        if backend.name == "hermes":
            regex_whole = _best(functools.partial(regex_hermes, text), settings.repeat)
            regex_stream = _best(_reparse(regex_hermes, chunks), 1)
            rows.append(_row("tool_parser", backend.name, "regex (peer)", text, chunks, regex_whole, regex_stream))
    return rows


def _reasoning_rows(registry: Registry, settings: ParserBenchSettings, size: int) -> list[dict[str, Any]]:
    rows = []
    thought = ("Let me think about the weather in 東京 and Paris, step by step. " * (size // 64 + 1))[:size]
    text = f"<think>\n{thought}\n</think>\n\nThe answer is 42."
    for backend in registry.backends(REASONING_PARSER):
        if backend.name not in ("deepseek_r1", "qwen3", "glm45", "generic") or (
                settings.names and backend.name not in settings.names):
            continue
        cls = registry.load(backend)
        options = {key: spec.default for key, spec in backend.spec.options.items()}
        chunks = _chunks(text, settings.chunk_chars)
        make = functools.partial(cls, options, ReasoningParserContext())
        whole = _best(lambda: make().extract(text), settings.repeat)  # noqa: B023 - called before the loop moves on
        streamed = _best(_stream(make, chunks), settings.repeat)
        rows.append(_row("reasoning_parser", backend.name, "pyagent", text, chunks, whole, streamed))
        reparse = _best(_reparse(make().extract, chunks), 1)
        rows.append(_row("reasoning_parser", backend.name, "reparse (peer)", text, chunks, 0.0, reparse))
    return rows


def run_parser_benchmark(settings: ParserBenchSettings, registry: Registry | None = None) -> dict[str, Any]:
    """Measure every installed parser (or ``settings.names``) against the peers; rows, ratios, workload."""
    registry = registry or get_registry()
    tools, calls = load_bfcl(settings.data)
    if not calls:
        raise FileNotFoundError(f"no BFCL_*.json instances in {settings.data}; pass --data FOLDER")
    rows = _tool_rows(registry, settings, tools, calls)
    rows += _reasoning_rows(registry, settings, size=int(max(r["kb"] for r in rows) * 1024) if rows else 4096)
    ratios = []
    by_key = {(r["kind"], r["parser"], r["implementation"]): r for r in rows}
    for (kind, name, implementation), row in by_key.items():
        if implementation != "pyagent":
            continue
        for peer in ("reparse (peer)", "regex (peer)"):
            other = by_key.get((kind, name, peer))
            if other:
                ratios.append({
                    "parser": name, "peer": peer,
                    "stream_speedup": other["stream_us_per_chunk"] / row["stream_us_per_chunk"],
                    "extract_ratio": (other["extract_us_per_kb"] / row["extract_us_per_kb"]
                                      if other["extract_us_per_kb"] else None),
                })
    return {
        "benchmark": "parsers", "calls": len(calls), "tools": len(tools), "chunk_chars": settings.chunk_chars,
        "repeat": settings.repeat, "rows": rows, "ratios": ratios,
    }
