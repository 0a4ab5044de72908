"""Grammar backends over JSONSchemaBench, MaskBench-style: compile time, time between masks, soundness.

Single thread, the embedded model's tokenizer. Per backend and schema: ``supports`` then ``compile``
(timed); for every compiled schema each instance is serialised (see
:mod:`pyagent_engine.benchmarks.schema_corpus`), tokenised by the model's tokenizer and walked through a
fresh matcher. The time between masks is one ``accept_token`` plus the next ``fill_bitmask``. Valid
instances must be accepted, invalid ones refused at some token or at the end. Backends are compared
with the first one named (the peer, ``xgrammar`` by default): ratios are backend / peer.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pyagent_core.interfaces.grammar import ConstraintSpec, GrammarBackend, GrammarContext, TokenizerInfo
from pyagent_core.kinds import GRAMMAR
from pyagent_core.registry import get_registry
from pyagent_engine.benchmarks.schema_corpus import SchemaCase, instance_texts, load_cases, walk
from pyagent_engine.models.grammar_vocab import load_embedded_tokenizer
from pyagent_engine.models.tokenizer import Tokenizer

DEFAULT_BACKENDS = ("xgrammar", "guidance", "lmfe")
STYLES = ("compact", "spaced")
_EXAMPLES = 8


def percentile(values: Sequence[float], q: float) -> float | None:
    """The ``q``-th percentile (0-100) of ``values`` by linear interpolation; ``None`` when empty."""
    if not values:
        return None
    if len(values) == 1:
        return float(values[0])
    return float(statistics.quantiles(values, n=100, method="inclusive")[min(max(int(q), 1), 99) - 1])


def make_backend(name: str, info: TokenizerInfo) -> GrammarBackend:
    """The grammar backend ``name`` from the registry, built for ``info`` with its default options."""
    registry = get_registry()
    selection = registry.select(GRAMMAR, name)
    backend: GrammarBackend = registry.load(selection.backend)(selection.options, GrammarContext(tokenizer_info=info))
    return backend


def _empty_counts() -> dict[str, Any]:
    return {
        "schemas": 0, "compiled": 0, "refused": 0, "failed": 0,
        "valid": {style: {"total": 0, "accepted": 0} for style in STYLES},
        "invalid": {"total": 0, "rejected": 0},
        "disagreements": 0, "walk_errors": 0,
        "examples": {"refused": [], "failed": [], "walk_errors": [], "valid_refused": [], "invalid_accepted": []},
    }


def _note(counts: dict[str, Any], key: str, text: str) -> None:
    if len(counts["examples"][key]) < _EXAMPLES:
        counts["examples"][key].append(text)


def measure_backend(backend: GrammarBackend, cases: Sequence[SchemaCase], tokenizer: Tokenizer,
                    styles: Sequence[str] = STYLES) -> dict[str, Any]:
    """Compile every case with ``backend`` and walk its instances; counts, examples and raw timings."""
    info = backend.tokenizer_info
    counts = _empty_counts()
    compile_seconds: list[float] = []
    step_seconds: list[float] = []
    for case in cases:
        counts["schemas"] += 1
        constraint = ConstraintSpec(json_schema=case.schema)
        reason = backend.supports(constraint)
        if reason is not None:
            counts["refused"] += 1
            _note(counts, "refused", f"{case.name}: {reason}")
            continue
        started = time.perf_counter()
        try:
            compiled = backend.compile(constraint)
        except Exception as error:  # one schema breaking a backend must not stop the sweep
            counts["failed"] += 1
            _note(counts, "failed", f"{case.name}: {type(error).__name__}: {str(error)[:200]}")
            continue
        compile_seconds.append(time.perf_counter() - started)
        counts["compiled"] += 1
        for valid, style, text in instance_texts(case, tuple(styles)):
            if not valid and style != styles[0]:
                continue
            try:
                result = walk(compiled, info, tokenizer.encode(text, add_special_tokens=False))
            except Exception as error:  # a backend raising mid-walk is counted, the sweep goes on
                counts["walk_errors"] += 1
                _note(counts, "walk_errors", f"{case.name}: {type(error).__name__}: {str(error)[:200]}")
                continue
            step_seconds.extend(result.step_seconds)
            counts["disagreements"] += result.disagreement is not None
            if valid:
                counts["valid"][style]["total"] += 1
                counts["valid"][style]["accepted"] += result.accepted
                if not result.accepted:
                    _note(counts, "valid_refused", f"{case.name} ({style}) at token {result.stopped_at}: {text[:120]}")
            else:
                counts["invalid"]["total"] += 1
                counts["invalid"]["rejected"] += not result.accepted
                if result.accepted:
                    _note(counts, "invalid_accepted", f"{case.name}: {text[:120]}")
    return {"counts": counts, "compile_seconds": compile_seconds, "step_seconds": step_seconds}


def _summary(raw: dict[str, Any]) -> dict[str, Any]:
    compile_s, step_s = raw["compile_seconds"], raw["step_seconds"]
    return {
        **raw["counts"],
        "compile_ms": {"p50": _ms(percentile(compile_s, 50)), "p99": _ms(percentile(compile_s, 99)),
                       "n": len(compile_s)},
        "mask_us": {"p50": _us(percentile(step_s, 50)), "p99": _us(percentile(step_s, 99)), "n": len(step_s)},
    }


def _ms(value: float | None) -> float | None:
    return None if value is None else round(value * 1e3, 3)


def _us(value: float | None) -> float | None:
    return None if value is None else round(value * 1e6, 1)


def _ratio(value: float | None, peer: float | None) -> float | None:
    return None if value is None or not peer else float(f"{value / peer:.3g}")


def run_mask_benchmark(backends: list[str] | None = None, limit: int | None = None, *,
                       folder: Path | None = None, stride: int = 1,
                       styles: Sequence[str] = STYLES) -> dict[str, Any]:
    """Measure each grammar backend over JSONSchemaBench; the first backend is the peer of the ratios.

    Args:
        backends: grammar backend names (default: xgrammar, guidance, lmfe).
        limit: at most this many schemas (sorted by file name, every ``stride``-th).
        folder: the JSONSchemaBench folder (default: ``shared/data/jsonschemabench``).
        stride: take every ``stride``-th schema file.
        styles: serialisations of valid instances (``compact``, ``spaced``); invalid ones use the first.

    Returns:
        ``{"setup": ..., "backends": {name: counts, compile_ms p50/p99, mask_us p50/p99},
        "ratios": {name: {"compile_p50", "compile_p99", "mask_p50", "mask_p99"}}}``; a backend that
        cannot be built reports ``{"error": reason}``.
    """
    names = list(backends or DEFAULT_BACKENDS)
    tokenizer, info = load_embedded_tokenizer()
    cases = load_cases(folder, limit, stride)
    results: dict[str, Any] = {}
    for name in names:
        try:
            backend = make_backend(name, info)
        except Exception as error:  # an unavailable backend is reported, the others still run
            results[name] = {"error": f"{type(error).__name__}: {error}"}
            continue
        results[name] = _summary(measure_backend(backend, cases, tokenizer, styles))
    peer = results.get(names[0], {})
    ratios = {
        name: {
            "compile_p50": _ratio(r["compile_ms"]["p50"], peer.get("compile_ms", {}).get("p50")),
            "compile_p99": _ratio(r["compile_ms"]["p99"], peer.get("compile_ms", {}).get("p99")),
            "mask_p50": _ratio(r["mask_us"]["p50"], peer.get("mask_us", {}).get("p50")),
            "mask_p99": _ratio(r["mask_us"]["p99"], peer.get("mask_us", {}).get("p99")),
        }
        for name, r in results.items() if "error" not in r
    }
    return {
        "setup": {"schemas": len(cases), "tokenizer": "embedded SmolLM2-135M-Instruct",
                  "vocab_size": info.vocab_size, "threads": 1, "styles": list(styles), "peer": names[0]},
        "backends": results,
        "ratios": ratios,
    }
