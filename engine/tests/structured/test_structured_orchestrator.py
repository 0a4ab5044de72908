"""The grammar orchestrator over the kit's vocabulary: fallback and its reasons, cache, pool, time limit."""

from __future__ import annotations

import inspect
import json
import threading

import attrs
import pytest

from pyagent_core.errors import (
    GrammarBackendError,
    GrammarTimeoutError,
    UnsatisfiableConstraintError,
    UnsupportedConstraintError,
)
from pyagent_core.interfaces.grammar import UNKNOWN_GRAMMAR_BYTES, ConstraintSpec, allocate_bitmask, allowed_tokens
from pyagent_core.testing.grammar import GrammarConformance, greedy_tokenize, kit_tokenizer_info
from pyagent_engine.requests.structured_params import StructuredOutputParams
from pyagent_engine.structured.orchestrator import ORDER_ENV, GrammarOrchestrator, StructuredConfig

CHOICE = ConstraintSpec(choice=["yes", "no", "maybe so"])


def orchestrator(registry, *order: str, **config) -> GrammarOrchestrator:
    return GrammarOrchestrator(registry, kit_tokenizer_info(), StructuredConfig(fallback_order=order, **config))


def params(constraint: ConstraintSpec = CHOICE, **fields) -> StructuredOutputParams:
    return StructuredOutputParams(constraint=constraint, **fields)


def test_the_choice_double_passes_the_grammar_kit(doubles):
    """The double every other test leans on is itself a conforming backend."""
    kit = type("Kit", (GrammarConformance,), {"impl": doubles.PrefixChoiceBackend,
                                              "spec": doubles.SPECS["test-choice"]})()
    ran = 0
    for name in dir(kit):
        method = getattr(kit, name)
        if not name.startswith("test_") or inspect.signature(method).parameters:  # parametrized: JSON only
            continue
        try:
            method()
        except pytest.skip.Exception:  # checks of kinds the double does not compile
            continue
        ran += 1
    assert ran >= 8


def test_auto_falls_back_and_records_why(registry):
    orch = orchestrator(registry, "test-nostart", "test-refuse", "test-broken", "test-choice")
    compiled = orch.compile(params())
    assert compiled.backend == "test-choice" and not compiled.cache_hit
    reasons = {s.backend: s.reason for s in compiled.skipped}
    assert list(reasons) == ["test-nostart", "test-refuse", "test-broken"]
    assert "failed to start" in reasons["test-nostart"] and "native library is missing" in reasons["test-nostart"]
    assert reasons["test-refuse"] == "unsupported: keyword 'x-test' is not implemented"
    assert reasons["test-broken"].startswith("compile failed") and "crashed" in reasons["test-broken"]
    info = kit_tokenizer_info()
    matcher = compiled.grammar.matcher()
    for token in greedy_tokenize(info, "maybe so"):
        assert matcher.accept_token(token)
    assert matcher.accept_token(info.eos_token_ids[0]) and matcher.is_terminated()


def test_backends_lacking_the_kind_are_skipped_without_being_built(registry, doubles):
    orch = orchestrator(registry, "test-choice", "test-refuse")
    with pytest.raises(UnsupportedConstraintError) as caught:
        orch.compile(params(ConstraintSpec(regex="[ab]+")))
    message = str(caught.value)
    assert "test-choice: does not support regex constraints (supports choice)" in message
    assert "test-refuse: does not support regex" in message
    assert "test-choice" not in orch._instances, "a backend that cannot serve the kind was constructed"


def test_every_backend_refusing_is_one_error_listing_all_reasons(registry):
    orch = orchestrator(registry, "test-refuse", "test-broken")
    with pytest.raises(UnsupportedConstraintError, match=r"test-refuse: unsupported: .*test-broken: compile failed"):
        orch.compile(params())


def test_no_fallback_tries_only_the_first_backend(registry):
    orch = orchestrator(registry, "test-refuse", "test-choice")
    with pytest.raises(UnsupportedConstraintError, match="test-refuse") as caught:
        orch.compile(params(fallback=False))
    assert "test-choice" not in str(caught.value)
    assert orch.compile(params()).backend == "test-choice"


def test_a_named_backend_is_used_alone(registry):
    orch = orchestrator(registry, "test-choice")
    with pytest.raises(UnsupportedConstraintError, match="test-broken"):
        orch.compile(params(backend="test-broken"))
    assert orch.compile(params(backend="test-choice")).skipped == ()
    with pytest.raises(GrammarBackendError, match="no grammar backend named 'nope'"):
        orch.submit(params(backend="nope"))


def test_fallback_order_from_the_environment_else_by_priority(registry):
    orch = orchestrator(registry)
    registry.environ[ORDER_ENV] = "test-refuse, test-choice"
    try:
        assert [b.name for b in orch.order()] == ["test-refuse", "test-choice"]
        assert orch.compile(params()).skipped[0].backend == "test-refuse"
    finally:
        del registry.environ[ORDER_ENV]
    by_priority = sorted(registry.available("grammar"), key=lambda b: (-b.spec.priority, b.name))
    assert [b.name for b in orch.order()] == [b.name for b in by_priority]


def test_cache_hits_by_backend_constraint_and_tokenizer(registry, doubles):
    orch = orchestrator(registry, "test-choice", cache_bytes=2 * (UNKNOWN_GRAMMAR_BYTES + 64))
    before = doubles.COMPILES.get("test-choice", 0)
    first, again = orch.compile(params()), orch.compile(params())
    assert not first.cache_hit and again.cache_hit and again.grammar is first.grammar
    assert doubles.COMPILES["test-choice"] == before + 1
    other = ConstraintSpec(choice=["a", "b"])
    orch.compile(params(other))
    orch.compile(params(ConstraintSpec(choice=["c"])))  # room for 2: evicts the least recently used (CHOICE)
    assert not orch.compile(params()).cache_hit
    assert orch.cache.stats.evictions >= 1
    fresh = GrammarOrchestrator(registry, attrs.evolve(kit_tokenizer_info(), vocab_size=200),
                                StructuredConfig(fallback_order=("test-choice",)))
    fresh.cache = orch.cache  # a shared cache still tells tokenizers apart
    assert not fresh.compile(params(other)).cache_hit


def test_the_cache_is_bounded_by_the_bytes_its_grammars_hold(registry, doubles, monkeypatch):
    """Each entry weighs its grammar's memory_bytes() (UNKNOWN_GRAMMAR_BYTES when the backend cannot tell)
    plus its constraint's size; the least recently used go until the sum fits."""
    choices = [ConstraintSpec(choice=[f"choice {i}"]) for i in range(5)]
    unknown = orchestrator(registry, "test-choice", cache_bytes=UNKNOWN_GRAMMAR_BYTES + 100)
    for constraint in choices[:2]:
        unknown.compile(params(constraint))
    assert len(unknown.cache) == 1 and unknown.cache.stats.evictions == 1
    assert UNKNOWN_GRAMMAR_BYTES < unknown.cache.stats.weight <= UNKNOWN_GRAMMAR_BYTES + 100
    monkeypatch.setattr(doubles.PrefixChoiceGrammar, "memory_bytes", lambda self: 1000, raising=False)
    counted = orchestrator(registry, "test-choice", cache_bytes=3500)
    for constraint in choices:
        counted.compile(params(constraint))
        assert counted.cache.stats.weight <= 3500
    assert len(counted.cache) == 3 and counted.cache.stats.evictions == 2
    assert counted.compile(params(choices[-1])).cache_hit and not counted.compile(params(choices[0])).cache_hit


def test_concurrent_requests_for_one_constraint_compile_once(registry, doubles):
    orch = orchestrator(registry, "test-gated", compile_threads=2)
    before = doubles.COMPILES.get("test-gated", 0)
    tickets = [orch.submit(params()), orch.submit(params())]
    assert all(t.poll() is None for t in tickets)
    doubles.GATE.set()
    results = [t.result() for t in tickets]
    assert results[0].grammar is results[1].grammar
    assert doubles.COMPILES["test-gated"] == before + 1
    assert sorted(r.cache_hit for r in results) == [False, True]


def test_a_compile_past_the_time_limit_fails_that_request_only(registry, doubles):
    orch = orchestrator(registry, "test-gated", "test-choice", compile_timeout_s=0.2, compile_threads=2)
    slow = orch.submit(params())
    quick = orch.submit(params(ConstraintSpec(choice=["a"]), backend="test-choice"))
    assert quick.result().backend == "test-choice"
    with pytest.raises(GrammarTimeoutError, match=r"took more than 0.2 s.*--grammar-timeout"):
        slow.result()
    doubles.GATE.set()
    orch.close()


def test_an_unsatisfiable_grammar_is_reported_not_served(registry):
    orch = orchestrator(registry, "test-empty", "test-choice")
    with pytest.raises(UnsatisfiableConstraintError, match=r"admits no output.*test-empty"):
        orch.compile(params())


def test_masks_come_from_the_serving_backend(registry):
    compiled = orchestrator(registry, "test-broken", "test-choice").compile(params())
    info = kit_tokenizer_info()
    bitmask = allocate_bitmask(1, info.vocab_size)
    compiled.grammar.matcher().fill_bitmask(bitmask, 0)
    starts = {bytes(info.vocab[t][:1]) for t in allowed_tokens(bitmask, 0, info.vocab_size)}
    assert starts == {b"y", b"n", b"m"}


def test_pool_threads_run_compiles_off_the_calling_thread(registry, doubles):
    seen: list[str] = []
    original = doubles.PrefixChoiceBackend.compile

    def spy(self, constraint):
        seen.append(threading.current_thread().name)
        return original(self, constraint)

    orch = orchestrator(registry, "test-choice", cache_bytes=0)
    doubles.PrefixChoiceBackend.compile = spy
    try:
        orch.compile(params())
    finally:
        doubles.PrefixChoiceBackend.compile = original
    assert seen and seen[0].startswith("pyagent-grammar") and seen[0] != threading.current_thread().name


def _accepts(compiled, text: str) -> bool:
    info = kit_tokenizer_info()
    matcher = compiled.grammar.matcher()
    return all(matcher.accept_token(t) for t in greedy_tokenize(info, text)) and matcher.accept_token(0)


def _needs(registry, *names: str) -> None:
    missing = [n for n in names if not any(b.name == n for b in registry.available("grammar"))]
    if missing:
        pytest.skip(f"needs the grammar backends {missing}")


def test_auto_prefers_a_backend_that_enforces_every_keyword(registry):
    """lmfe refuses minimum (its table says so) and is passed over without compiling; xgrammar enforces it."""
    _needs(registry, "lmfe", "xgrammar")
    compiled = orchestrator(registry, "lmfe", "xgrammar").compile(params(ConstraintSpec(
        json_schema={"type": "integer", "minimum": 3})))
    assert compiled.backend == "xgrammar" and compiled.unenforced == ()
    assert [s.backend for s in compiled.skipped] == ["lmfe"]
    assert "does not enforce minimum" in compiled.skipped[0].reason
    assert _accepts(compiled, "3") and not _accepts(compiled, "2")


def test_auto_passes_over_the_first_backend_when_it_ignores_a_keyword(registry):
    """xgrammar comes first and compiles allOf without enforcing it; guidance enforces it and serves."""
    _needs(registry, "guidance", "xgrammar")
    schema = {"allOf": [{"type": "string"}, {"type": "string", "maxLength": 2}]}
    compiled = orchestrator(registry, "xgrammar", "guidance").compile(params(ConstraintSpec(json_schema=schema)))
    assert compiled.backend == "guidance" and compiled.unenforced == ()
    assert [s.backend for s in compiled.skipped] == ["xgrammar"] and "allOf" in compiled.skipped[0].reason
    assert _accepts(compiled, '"ab"') and not _accepts(compiled, '"abc"')
    ignoring = orchestrator(registry, "xgrammar").compile(params(ConstraintSpec(json_schema=schema)))
    assert ignoring.unenforced == ("allOf",) and _accepts(ignoring, '"abc"'), "what auto used to serve"


@pytest.mark.parametrize(("schema", "keyword", "breaking", "valid"), [
    # jsonschema is the reference for what breaks the keyword
    ({"$schema": "http://json-schema.org/draft-07/schema#", "type": "object",
      "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}, "dependencies": {"a": ["b"]}},
     "dependencies", '{"a": 1}', '{"a": 1, "b": 2}'),
    ({"type": "array", "items": {"type": "integer"}, "uniqueItems": True}, "uniqueItems", "[1, 1]", "[1, 2]"),
    ({"oneOf": [{"type": "integer"}, {"type": "number"}]}, "oneOf", "1", "1.5"),
    ({"type": "string", "format": "regex"}, "format:regex", '"("', '"a+"'),
])
def test_when_no_backend_enforces_a_keyword_the_report_names_it(registry, schema, keyword, breaking, valid):
    import jsonschema

    _needs(registry, "guidance", "xgrammar")
    validator = jsonschema.validators.validator_for(schema)
    assert not validator(schema, format_checker=validator.FORMAT_CHECKER).is_valid(json.loads(breaking))
    compiled = orchestrator(registry, "guidance", "xgrammar").compile(params(ConstraintSpec(json_schema=schema)))
    assert compiled.backend == "xgrammar" and compiled.unenforced == (keyword,)
    assert _accepts(compiled, valid) and _accepts(compiled, breaking), "xgrammar ignores it, as its table says"
    assert [s.backend for s in compiled.skipped] == ["guidance"]  # tried second, refused


def test_formats_a_backend_enforces_count_as_enforced(registry):
    _needs(registry, "xgrammar")
    compiled = orchestrator(registry, "xgrammar").compile(params(ConstraintSpec(
        json_schema={"type": "string", "format": "email"})))
    assert compiled.unenforced == () and _accepts(compiled, '"a@b.co"') and not _accepts(compiled, '"no"')


def test_a_named_backend_reports_what_it_leaves_unenforced(registry):
    _needs(registry, "xgrammar")
    compiled = orchestrator(registry).compile(params(ConstraintSpec(
        json_schema={"type": "array", "uniqueItems": True, "not": {"maxItems": 0}}), backend="xgrammar"))
    assert compiled.unenforced == ("not", "uniqueItems") and not compiled.skipped
