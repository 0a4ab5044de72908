"""``pyagent bench grammars --jump-forward``: greedy output, forced share and tok/s with jump-forward off, on, and
under the earlier rule, in one run.

Each backend generates for the same schemas in every whitespace mode: compact, bounded, any (greedy, chat prompt that
shows the schema) three times: jump-forward off (every token sampled), on (a token is forced where it
is alone in the mask, :mod:`pyagent_engine.structured.runtime`), and under the earlier rule, kept here
as the peer: the text the backend reports as forced, tokenized by the engine and appended. Every
constraint is compiled before the timed runs, so all three hit the compile cache. Reported per mode:
output tokens, forced tokens and their share, seconds and tok/s, and how many outputs differ from the
run with jump-forward off (the lossless rule must have none).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

import attrs

from pyagent_core.errors import ConstraintError
from pyagent_core.interfaces.grammar import WHITESPACE_MODES, ConstraintSpec

if TYPE_CHECKING:
    from pyagent_engine.api.llm import LLM
    from pyagent_engine.benchmarks.schema_corpus import SchemaCase
    from pyagent_engine.requests.request import Request, RequestOutput
    from pyagent_engine.structured.runtime import StructuredOutputs

MODES = ("off", "on", "retokenized")
_EXAMPLES = 3


def retokenized_run(structured: StructuredOutputs, request: Request) -> Iterator[int]:
    """The earlier jump-forward rule (this benchmark's peer): the backend's forced text
    (``GrammarMatcher.jump_forward``) tokenized by the engine's tokenizer, its tokens accepted until the
    matcher refuses one. It changes greedy output: the model may tokenize that text differently."""
    state = structured.active.get(request.request_id)
    if state is None or not state.compiled.spec.jump_forward:
        return
    state.next_row = None
    try:
        forced = state.matcher.jump_forward()
        tokens = structured.tokenizer.encode(forced, add_special_tokens=False) if forced else []
    except Exception:  # as the earlier rule did: a backend failing here only ends the run
        return
    for token in tokens:
        if not state.matcher.accept_token(token):
            return
        state.jump_forward_tokens += 1
        yield token


@contextlib.contextmanager
def jump_forward_mode(structured: StructuredOutputs, mode: str) -> Iterator[None]:
    """Run the engine's structured output with jump-forward ``mode`` (one of :data:`MODES`) inside the block."""
    config = structured.config
    structured.config = attrs.evolve(config, jump_forward=mode != "off")
    if mode == "retokenized":  # the peer replaces the engine's rule on this instance only
        structured.jump_forward = lambda request: retokenized_run(structured, request)  # type: ignore[method-assign]
    try:
        yield
    finally:
        structured.config = config
        vars(structured).pop("jump_forward", None)


def _requests(cases: Sequence[SchemaCase], backend: str, max_tokens: int) -> tuple[list[str], list[Any]]:
    from pyagent_engine.benchmarks.grammar_e2e import prompt_for
    from pyagent_engine.requests.params import SamplingParams
    from pyagent_engine.requests.structured_params import StructuredOutputParams

    prompts, params = [], []
    for case in cases:
        for whitespace in WHITESPACE_MODES:
            prompts.append(prompt_for(case))
            params.append(SamplingParams(max_tokens=max_tokens, temperature=0, structured=StructuredOutputParams(
                constraint=ConstraintSpec(json_schema=case.schema, whitespace=whitespace), backend=backend)))
    return prompts, params


def _precompile(llm: LLM, params: list[Any]) -> None:
    for p in params:
        with contextlib.suppress(ConstraintError):  # a refused constraint fails its request the same way each run
            llm.engine.structured.orchestrator.compile(p.structured)


def _summary(outputs: list[RequestOutput], seconds: float, baseline: list[RequestOutput] | None) -> dict[str, Any]:
    served = [o for o in outputs if o.output_token_ids]
    tokens = sum(len(o.output_token_ids) for o in served)
    forced = sum(o.structured.jump_forward_tokens for o in served if o.structured)
    report: dict[str, Any] = {"outputs": len(served), "output_tokens": tokens, "forced_tokens": forced,
                              "forced_share": round(forced / tokens, 3) if tokens else None,
                              "seconds": round(seconds, 3), "tok_s": round(tokens / seconds, 1) if seconds else None}
    if baseline is not None:
        differ = [(o, b) for o, b in zip(outputs, baseline, strict=True) if o.output_token_ids != b.output_token_ids]
        report["differ_from_off"] = len(differ)
        report["examples"] = [f"{o.text!r} vs off {b.text!r}" for o, b in differ[:_EXAMPLES]]
    return report


def compare_jump_forward(llm: LLM, backend: str, cases: Sequence[SchemaCase], max_tokens: int) -> dict[str, Any]:
    """Off, on and the earlier rule for ``backend`` on ``cases`` (each in every whitespace mode)."""
    prompts, params = _requests(cases, backend, max_tokens)
    _precompile(llm, params)
    report: dict[str, Any] = {"requests": len(prompts)}
    baseline: list[RequestOutput] | None = None
    for mode in MODES:
        with jump_forward_mode(llm.engine.structured, mode):
            started = time.perf_counter()
            outputs = llm.generate(prompts, params, chat=True)
            seconds = time.perf_counter() - started
        report[mode] = _summary(outputs, seconds, baseline)
        baseline = outputs if baseline is None else baseline
    on, off = report["on"]["tok_s"], report["off"]["tok_s"]
    report["on_over_off"] = round(on / off, 3) if on and off else None
    return report
