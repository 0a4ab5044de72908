"""``pyagent bench grammars``' measuring code: the judging of outputs, and a tiny run of every part."""

from __future__ import annotations

import pytest

from pyagent_core.interfaces.grammar import WHITESPACE_MODES
from pyagent_engine.benchmarks.grammar_e2e import GrammarBenchSettings, judge, run_grammar_benchmark
from pyagent_engine.benchmarks.schema_corpus import SchemaCase
from pyagent_engine.requests.request import RequestOutput

CASE = SchemaCase("person", {"type": "object", "properties": {"age": {"type": "integer"}}, "required": ["age"]},
                  valid=({"age": 3},), invalid=())


def output(text: str, reason: str = "stop", error: str | None = None) -> RequestOutput:
    return RequestOutput(request_id="0", prompt=None, prompt_token_ids=[1], output_token_ids=[1] * (not error),
                         text=text, delta="", finished=True, finish_reason="error" if error else reason, error=error)


@pytest.mark.parametrize(
    ("result", "outcome", "detail"),
    [
        (output('{"age": 3}'), "valid", None),
        (output('{"age": "3"}'), "invalid", "ValidationError: '3' is not of type 'integer'"),
        (output('{"age": 3'), "invalid", "JSONDecodeError"),
        (output('{"age": 3', reason="length"), "truncated", None),
        (output("", error="no grammar backend can serve this json_schema constraint (x: y)"), "refused", "(x: y)"),
        (output("", error="model step failed"), "error", "model step failed"),
    ],
)
def test_judge_outcomes(result, outcome, detail):
    got, why = judge(CASE, result)
    assert got == outcome
    assert (why is None) if detail is None else detail in (why or "")


def test_a_tiny_run_reports_every_part(llm):
    if "xgrammar" not in {b.name for b in llm.engine.registry.available("grammar")}:
        pytest.skip("pyagent-grammar-xgrammar is not installed")
    settings = GrammarBenchSettings(backends=("xgrammar",), schemas=2, max_tokens=12, mask_limit=2,
                                    overhead_schemas=1, max_schema_chars=300, jump_forward=True)
    report = run_grammar_benchmark(settings, llm)
    assert report["masks"]["backends"]["xgrammar"]["schemas"] == 2
    overhead = report["overhead"]["xgrammar"]
    assert overhead["schemas"] == 1 and overhead["direct_us_per_token"] > 0 and overhead["engine_us_per_token"] > 0
    e2e = report["end_to_end"]["xgrammar"]
    assert sum(e2e[k] for k in ("valid", "invalid", "truncated", "refused", "error")) == e2e["schemas"] == 2
    assert 0 <= e2e["jump_forward_tokens"] <= e2e["output_tokens"] <= 2 * 12
    assert e2e["ratio"] > 0 and e2e["met"] == (e2e["ratio"] >= 0.9)
    jump = report["jump_forward"]["xgrammar"]
    assert jump["requests"] == 2 * len(WHITESPACE_MODES)  # two schemas in each whitespace mode
    assert jump["off"]["forced_tokens"] == 0 and jump["on"]["differ_from_off"] == 0
    for mode in ("on", "retokenized"):
        assert 0 <= jump[mode]["forced_tokens"] <= jump[mode]["output_tokens"] <= jump["requests"] * 12
    assert not vars(llm.engine.structured).get("jump_forward"), "the peer's rule was left installed"
