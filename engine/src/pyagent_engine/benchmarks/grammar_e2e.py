"""``pyagent bench grammars``: structured output end to end, each figure against a peer measured in the same run.

- **masks**: compile time and time between masks p50/p99 per backend over JSONSchemaBench
  (:func:`pyagent_engine.benchmarks.grammar_masks.run_mask_benchmark`, single thread).
- **overhead**: per token, the engine's structured-output path (``apply_masks`` on the batch's logits,
  then ``accept``) against calling the backend directly (``fill_bitmask``, the same bitmask kernel,
  ``accept_token``), walking a valid instance of each schema token by token (the two paths alternate,
  the fastest of three walks counts).
- **end to end**: the embedded model generates for N schemas per backend (greedy, chat prompt that
  shows the schema); every finished output is parsed and validated with ``jsonschema``; refusals,
  truncations and failures are counted with examples. The peer is unconstrained generation of the
  same prompts, each request held to the token count its constrained run produced (``ignore_eos``),
  so both runs do the same forward passes; the ratio is constrained tok/s over unconstrained tok/s
  (goal >= 0.9). Constrained time includes compiling (cold cache) and the tokens jump-forward appended.
- **jump-forward** (``jump_forward=True``): the same schemas, compact and free whitespace, with jump-forward
  off, on and under the earlier rule (:mod:`pyagent_engine.benchmarks.jump_forward`).
"""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import attrs

from pyagent_core.interfaces.grammar import ConstraintSpec, allocate_bitmask
from pyagent_engine.benchmarks.schema_corpus import SchemaCase, load_cases

if TYPE_CHECKING:
    from pyagent_engine.api.llm import LLM
    from pyagent_engine.requests.request import RequestOutput

GOAL = 0.9
_EXAMPLES = 5
_REPEAT = 3


@attrs.frozen(kw_only=True)
class GrammarBenchSettings:
    """What ``pyagent bench grammars`` runs.

    Attributes:
        backends: grammar backends to measure (default: every available one).
        schemas: schemas per backend in the end-to-end run (spread evenly over the corpus).
        max_tokens: the most tokens per generated output.
        mask_limit: schemas for the mask benchmark (``None``: all of them).
        overhead_schemas: schemas whose valid instances are walked for the per-token overhead.
        max_schema_chars: longer schemas (as JSON text) are left out: the prompt shows the schema.
        jump_forward: also compare jump-forward off, on and the earlier rule on the end-to-end schemas.
        compile_timeout_s: the engine's compile time limit (every schema of a backend is submitted
            at once, so it covers the wait in the compile queue too).
    """

    backends: tuple[str, ...] = ()
    schemas: int = 50
    max_tokens: int = 128
    mask_limit: int | None = None
    overhead_schemas: int = 20
    max_schema_chars: int = 3000
    jump_forward: bool = False
    compile_timeout_s: float = 30.0

    @classmethod
    def quick(cls, backends: Sequence[str] = (), jump_forward: bool = False) -> GrammarBenchSettings:
        """A smoke test: a few schemas and tokens."""
        return cls(backends=tuple(backends), schemas=3, max_tokens=24, mask_limit=3, overhead_schemas=2,
                   max_schema_chars=600, jump_forward=jump_forward)


def _spread(cases: list[SchemaCase], count: int) -> list[SchemaCase]:
    """``count`` cases spread evenly over ``cases`` (all of them when there are fewer)."""
    if count >= len(cases):
        return cases
    return [cases[i * len(cases) // count] for i in range(count)]


def prompt_for(case: SchemaCase) -> str:
    """The chat prompt of the end-to-end run: the schema, asking for one matching JSON value."""
    return f"Reply with one JSON value that matches this JSON schema:\n{json.dumps(case.schema)}"


def judge(case: SchemaCase, output: RequestOutput) -> tuple[str, str | None]:
    """``(outcome, detail)`` of one constrained output: ``valid``, ``invalid`` (with the validation error),
    ``truncated`` (max_tokens), ``refused`` (no backend compiled it) or ``error``."""
    import jsonschema

    if output.error is not None:
        refused = output.error.startswith("no grammar backend can serve")
        return ("refused" if refused else "error"), output.error
    if output.finish_reason != "stop":
        return "truncated", None
    try:
        jsonschema.validate(json.loads(output.text), case.schema)
    except (ValueError, jsonschema.ValidationError) as exc:
        return "invalid", f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
    return "valid", None


def measure_overhead(llm: LLM, backend: str, cases: Sequence[SchemaCase]) -> dict[str, Any]:
    """Per-token µs of the engine's structured-output path and of the backend called directly."""
    import torch

    from pyagent_core.errors import ConstraintError
    from pyagent_engine.requests.params import SamplingParams
    from pyagent_engine.requests.request import Request
    from pyagent_engine.requests.structured_params import StructuredOutputParams
    from pyagent_kernels.grammar import apply_token_bitmask

    structured = llm.engine.structured
    logits = torch.zeros(1, structured.vocab_size)
    rows = torch.zeros(1, dtype=torch.long)
    direct: list[float] = []
    engine_path: list[float] = []
    for index, case in enumerate(cases):
        if not case.valid:
            continue
        tokens = llm.tokenizer.encode(json.dumps(case.valid[0]), add_special_tokens=False)
        params = SamplingParams(structured=StructuredOutputParams(
            constraint=ConstraintSpec(json_schema=case.schema), backend=backend))
        request = Request(f"overhead-{index}", [0], params)
        try:
            structured.submit(request)
            structured.poll(block=True)
        except ConstraintError:
            continue
        state = structured.active.get(request.request_id)
        if state is None:  # refused or failed to compile
            structured.release(request)
            continue
        matcher = state.compiled.grammar.matcher()
        bitmask = allocate_bitmask(1, structured.vocab_size)
        best_direct = best_engine = float("inf")
        for _ in range(_REPEAT):  # alternate the two paths; the fastest walk of each counts
            matcher.reset()
            started = time.perf_counter()
            try:
                for token in tokens:
                    matcher.fill_bitmask(bitmask, 0)
                    apply_token_bitmask(logits, bitmask, rows)
                    if not matcher.accept_token(token):
                        break
            except Exception:  # a backend failing mid-walk: this schema is left out of the comparison
                break
            best_direct = min(best_direct, time.perf_counter() - started)
            state.matcher.reset()
            started = time.perf_counter()
            for token in tokens:
                structured.apply_masks([request], logits)
                if structured.accept(request, token) is not None:
                    break
            best_engine = min(best_engine, time.perf_counter() - started)
        structured.release(request)
        if best_engine < float("inf"):
            direct.append(best_direct / max(1, len(tokens)))
            engine_path.append(best_engine / max(1, len(tokens)))
    if not direct:
        return {"schemas": 0}
    direct_us, engine_us = statistics.median(direct) * 1e6, statistics.median(engine_path) * 1e6
    return {"schemas": len(direct), "direct_us_per_token": round(direct_us, 1),
            "engine_us_per_token": round(engine_us, 1), "overhead_us_per_token": round(engine_us - direct_us, 1),
            "ratio": round(engine_us / direct_us, 2) if direct_us else None}


def _timed(llm: LLM, prompts: list[str], params: list[Any]) -> tuple[list[RequestOutput], float]:
    started = time.perf_counter()
    outputs = llm.generate(prompts, params, chat=True)
    return outputs, time.perf_counter() - started


def run_end_to_end(llm: LLM, backend: str, cases: Sequence[SchemaCase], max_tokens: int) -> dict[str, Any]:
    """Constrained generation with ``backend`` on ``cases`` against unconstrained generation of as many tokens."""
    from pyagent_engine.requests.params import SamplingParams
    from pyagent_engine.requests.structured_params import StructuredOutputParams

    prompts = [prompt_for(case) for case in cases]
    constrained = [SamplingParams(max_tokens=max_tokens, temperature=0, structured=StructuredOutputParams(
        constraint=ConstraintSpec(json_schema=case.schema), backend=backend)) for case in cases]
    outputs, constrained_s = _timed(llm, prompts, constrained)
    outcomes: dict[str, int] = {k: 0 for k in ("valid", "invalid", "truncated", "refused", "error")}
    examples: dict[str, list[str]] = {"invalid": [], "refused": [], "error": []}
    for case, output in zip(cases, outputs, strict=True):
        outcome, detail = judge(case, output)
        outcomes[outcome] += 1
        if outcome in examples and len(examples[outcome]) < _EXAMPLES:
            examples[outcome].append(f"{case.name}: {detail}")
    served = [(prompt, output) for prompt, output in zip(prompts, outputs, strict=True) if output.output_token_ids]
    tokens = sum(len(o.output_token_ids) for _, o in served)
    jumped = sum(o.structured.jump_forward_tokens for _, o in served if o.structured)
    report: dict[str, Any] = {**outcomes, "schemas": len(cases), "output_tokens": tokens,
                              "jump_forward_tokens": jumped,
                              "jump_forward_share": round(jumped / tokens, 3) if tokens else None,
                              "constrained_s": round(constrained_s, 3), "examples": examples}
    if not served:
        return {**report, "constrained_tok_s": None, "unconstrained_tok_s": None, "ratio": None, "met": None}
    peer = [SamplingParams(max_tokens=len(o.output_token_ids), temperature=0, ignore_eos=True) for _, o in served]
    _, unconstrained_s = _timed(llm, [p for p, _ in served], peer)
    ratio = unconstrained_s / constrained_s  # same tokens both ways: the ratio of the tok/s
    return {**report, "unconstrained_s": round(unconstrained_s, 3),
            "constrained_tok_s": round(tokens / constrained_s, 1),
            "unconstrained_tok_s": round(tokens / unconstrained_s, 1), "ratio": round(ratio, 3), "met": ratio >= GOAL}


def _mask_report(backends: list[str], limit: int | None) -> dict[str, Any]:
    try:
        from pyagent_engine.benchmarks.grammar_masks import run_mask_benchmark
    except ImportError as exc:
        return {"error": f"the mask benchmark is not installed: {exc}"}
    return run_mask_benchmark(backends, limit)


def run_grammar_benchmark(settings: GrammarBenchSettings, llm: LLM | None = None) -> dict[str, Any]:
    """Every measurement of the module doc for ``settings.backends``; ``llm`` defaults to the embedded model."""
    import torch

    from pyagent_engine.api.llm import LLM
    from pyagent_engine.structured.orchestrator import StructuredConfig

    owned = llm is None
    engine = llm or LLM(structured=StructuredConfig(compile_timeout_s=settings.compile_timeout_s))
    try:
        registry = engine.engine.registry
        names = list(settings.backends) or [b.name for b in sorted(registry.available("grammar"),
                                                                    key=lambda b: (-b.spec.priority, b.name))]
        corpus = [c for c in load_cases() if len(json.dumps(c.schema)) <= settings.max_schema_chars]
        e2e_cases = _spread(corpus, settings.schemas)
        overhead_cases = _spread([c for c in corpus if c.valid], settings.overhead_schemas)
        report: dict[str, Any] = {
            "setup": {"backends": names, "schemas_per_backend": len(e2e_cases), "max_tokens": settings.max_tokens,
                      "torch_threads": torch.get_num_threads(), "goal_ratio": GOAL,
                      "model": "embedded SmolLM2-135M-Instruct", "greedy": True},
            "masks": _mask_report(names, settings.mask_limit),
            "overhead": {name: measure_overhead(engine, name, overhead_cases) for name in names},
            "end_to_end": {name: run_end_to_end(engine, name, e2e_cases, settings.max_tokens) for name in names},
        }
        if settings.jump_forward:
            from pyagent_engine.benchmarks.jump_forward import compare_jump_forward

            report["jump_forward"] = {name: compare_jump_forward(engine, name, e2e_cases, settings.max_tokens)
                                      for name in names}
    finally:
        if owned:
            engine.close()
    return report


def _cell(value: Any, digits: int = 1, suffix: str = "") -> str:
    return "-" if value is None else f"{value:.{digits}f}{suffix}" if isinstance(value, float) else f"{value}{suffix}"


def print_report(report: dict[str, Any]) -> None:
    """The report as tables: masks, per-token overhead, end to end."""
    from pyagent_core.commands import print_table

    setup, masks = report["setup"], report["masks"]
    if "error" in masks:
        print_table("compile and mask times", ["error"], [(masks["error"],)])
    else:
        print_table(
            f"compile and mask times over {masks['setup']['schemas']} schemas, single thread "
            f"(ratios to {masks['setup']['peer']})",
            ["backend", "compiled", "refused", "failed", "compile p50 ms", "compile p99 ms", "mask p50 µs",
             "mask p99 µs", "compile p50 ratio", "mask p50 ratio"],
            [(name, r.get("compiled"), r.get("refused"), r.get("failed"), _cell(r.get("compile_ms", {}).get("p50"), 2),
              _cell(r.get("compile_ms", {}).get("p99"), 2), _cell(r.get("mask_us", {}).get("p50")),
              _cell(r.get("mask_us", {}).get("p99")), _cell(masks["ratios"].get(name, {}).get("compile_p50"), 2, "x"),
              _cell(masks["ratios"].get(name, {}).get("mask_p50"), 2, "x")) if "error" not in r
             else (name, r["error"], "", "", "", "", "", "", "", "") for name, r in masks["backends"].items()],
        )
    print_table(
        "per-token cost of the engine's structured-output path vs calling the backend directly (median over schemas)",
        ["backend", "schemas", "direct µs/token", "engine µs/token", "overhead µs/token", "engine / direct"],
        [(name, r["schemas"], _cell(r.get("direct_us_per_token")), _cell(r.get("engine_us_per_token")),
          _cell(r.get("overhead_us_per_token")), _cell(r.get("ratio"), 2, "x"))
         for name, r in report["overhead"].items()],
    )
    print_table(
        f"end to end: {setup['schemas_per_backend']} schemas per backend, greedy, at most {setup['max_tokens']} "
        f"tokens, {setup['torch_threads']} torch threads; peer: unconstrained, same prompts and token counts",
        ["backend", "valid", "invalid", "truncated", "refused", "error", "tokens", "jump-forward share",
         "constrained tok/s", "unconstrained tok/s", "ratio", f">= {GOAL}x"],
        [(name, r["valid"], r["invalid"], r["truncated"], r["refused"], r["error"], r["output_tokens"],
          _cell(r["jump_forward_share"], 3), _cell(r["constrained_tok_s"]), _cell(r["unconstrained_tok_s"]),
          _cell(r["ratio"], 2, "x"), "-" if r["met"] is None else "yes" if r["met"] else "no")
         for name, r in report["end_to_end"].items()],
    )
    if "jump_forward" in report:
        from pyagent_engine.benchmarks.jump_forward import MODES as modes

        print_table(
            "jump-forward: the end-to-end schemas in compact and free whitespace, greedy; off, on (a token alone "
            "in the mask) and the earlier rule (the backend's forced text, retokenized)",
            ["backend", "requests", *(f"{m} forced share" for m in modes[1:]), *(f"{m} tok/s" for m in modes),
             "on / off tok/s", *(f"{m} outputs != off" for m in modes[1:])],
            [(name, r["requests"], *(_cell(r[m]["forced_share"], 3) for m in modes[1:]),
              *(_cell(r[m]["tok_s"]) for m in modes), _cell(r["on_over_off"], 2, "x"),
              *(r[m]["differ_from_off"] for m in modes[1:])) for name, r in report["jump_forward"].items()],
        )
