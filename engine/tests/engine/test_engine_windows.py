"""Sliding windows and score capping through the engine, on the embedded model given windowed attention.

The embedded SmolLM2 with every other layer limited to a window of :data:`WINDOW` positions and its
scores capped: the attention backend gets both from the model's attention context, the output changes (the
prompts are longer than the window), greedy tokens stay the same with prefix caching and speculative
decoding (chains and trees) on or off, and a backend whose spec lacks windows or capping is never
picked for such a model.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import attrs
import pytest

from pyagent_attention_torch_sdpa.plugin import SPEC as TORCH_SDPA
from pyagent_core import hookimpl
from pyagent_core.errors import BackendUnavailableError
from pyagent_core.interfaces.attention import AttentionContext
from pyagent_core.registry import Registry
from pyagent_core.types import AttentionSpec
from pyagent_engine.api.llm import LLM
from pyagent_engine.core.attention_choice import AttentionFallbackWarning
from pyagent_engine.core.config import EngineConfig
from pyagent_engine.core.engine import Engine
from pyagent_engine.models.loader import LoadedModel
from pyagent_engine.requests.params import SamplingParams
from pyagent_engine.requests.request import Request
from pyagent_engine.spec.config import SpeculativeConfig
from pyagent_engine.spec.tree import tree_mask
from pyagent_engine.stages import inputs

WINDOW = 32
SOFT_CAP = 20.0
GREEDY = SamplingParams(temperature=0, max_tokens=24, ignore_eos=True)
PROMPTS = (  # repetitive, so that drafts get accepted; with branches, so that suffix drafts are trees
    "Repeat after me: the cat sat on the mat, the cat ran to the door, the cat sat on the rug, the cat ran to "
    "the mat, the cat sat on the door.",
    "List the days of the week twice: Monday, Tuesday, Wednesday, Thursday, Friday, Saturday, Sunday, then again.",
)


class Windowed:
    """A model whose attention context has a window on its even layers and capped scores."""

    def __init__(self, model: Any) -> None:
        self.model = model

    def attention_context(self, config: Any, block_size: int, dtype: str) -> AttentionContext:
        windows = tuple(WINDOW if layer % 2 == 0 else None for layer in range(config.num_layers))
        return attrs.evolve(self.model.attention_context(config, block_size, dtype), sliding_windows=windows,
                            logits_soft_cap=SOFT_CAP)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.model, name)


@pytest.fixture(scope="module")
def windowed(llm_bf16: LLM) -> LoadedModel:
    """The embedded model with a window on its even layers and capped scores."""
    return attrs.evolve(llm_bf16.loaded, model=Windowed(llm_bf16.loaded.model))


@pytest.fixture(scope="module")
def prompts(llm_bf16: LLM) -> list[list[int]]:
    ids = [llm_bf16.encode(p, chat=True)[0] for p in PROMPTS]
    assert min(len(p) for p in ids) > WINDOW + 16
    return ids


def generate(model: LoadedModel, prompts: Sequence[list[int]], **kwargs: object) -> list[list[int]]:
    """Greedy outputs of ``prompts`` run together on a new engine for ``model``."""
    return outputs(run(Engine(model, **kwargs), prompts))  # type: ignore[arg-type]


def run(engine: Engine, prompts: Sequence[list[int]], passes: int = 1) -> list[Request]:
    """The requests of ``prompts`` run greedily together ``passes`` times on ``engine`` (the last
    pass's); closes the engine."""
    try:
        for _ in range(passes):
            requests = [engine.add_request(ids, GREEDY) for ids in prompts]
            while engine.has_unfinished():
                engine.step()
        return requests
    finally:
        engine.close()


def outputs(requests: Sequence[Request]) -> list[list[int]]:
    return [list(r.output_token_ids) for r in requests]


@pytest.fixture(scope="module")
def reference(windowed: LoadedModel, prompts: list[list[int]]) -> list[list[int]]:
    """Greedy outputs of the windowed model: no prefix caching, no speculation."""
    return generate(windowed, prompts, config=EngineConfig(kv_cache_gib=0.05))


def test_the_backend_attends_with_the_models_windows_and_cap(llm_bf16: LLM, windowed: LoadedModel,
                                                             prompts: list[list[int]],
                                                             reference: list[list[int]]) -> None:
    engine = Engine(windowed, config=EngineConfig(kv_cache_gib=0.02))
    try:
        context = engine.forward.attention.context
        assert context.sliding_windows[:3] == (WINDOW, None, WINDOW) and context.logits_soft_cap == SOFT_CAP
    finally:
        engine.close()
    plain = generate(llm_bf16.loaded, prompts, config=EngineConfig(kv_cache_gib=0.05))
    assert plain != reference, "the window and the cap changed no token: the test does not reach them"


def test_greedy_tokens_do_not_change_with_chunked_prefill_and_prefix_cache_hits(
        windowed: LoadedModel, prompts: list[list[int]], reference: list[list[int]]) -> None:
    config = EngineConfig(kv_cache_gib=0.05, prefix_caching=True, max_num_seqs=4, max_num_batched_tokens=16)
    assert outputs(run(Engine(windowed, config=config), prompts)) == reference  # prefill in chunks of 16
    second = run(Engine(windowed, config=config), prompts, passes=2)  # hits the first pass's blocks
    assert outputs(second) == reference
    assert all(r.num_cached_tokens > WINDOW for r in second)


@pytest.mark.parametrize(("proposer", "trees"), [("ngram", False), ("suffix", True)])
def test_greedy_tokens_do_not_change_with_speculation(windowed: LoadedModel, prompts: list[list[int]],
                                                      reference: list[list[int]], proposer: str, trees: bool,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    masks: list[object] = []

    def recorded(*args: object) -> object:
        masks.append(mask := tree_mask(*args))  # type: ignore[arg-type]
        return mask

    monkeypatch.setattr(inputs, "tree_mask", recorded)
    config = SpeculativeConfig(proposer=proposer, num_draft_tokens=8)
    engine = Engine(windowed, config=EngineConfig(kv_cache_gib=0.05), speculative=config)
    assert outputs(run(engine, prompts)) == reference
    assert engine.speculative is not None and engine.speculative.stats.num_accepted_tokens > 0
    assert any(mask is not None for mask in masks) == trees, "verification did not take the path meant"


class _Limited:
    """Plugin: the torch-sdpa backend registered under specs that drop windows, then capping."""

    @hookimpl
    def pyagent_register_attention_backends(self, register: Callable[[AttentionSpec], None]) -> None:
        register(attrs.evolve(TORCH_SDPA, name="tp_windowless", priority=100, sliding_window=False))
        register(attrs.evolve(TORCH_SDPA, name="tp_uncapped", priority=90, logits_soft_cap=False))


@pytest.fixture(scope="module")
def limited_registry() -> Registry:
    return Registry(plugins=[("limited-attention", _Limited())]).load_plugins()


def test_backends_without_windows_or_capping_are_refused(limited_registry: Registry, windowed: LoadedModel,
                                                         llm_bf16: LLM) -> None:
    with pytest.raises(BackendUnavailableError, match=r"'tp_windowless' is not available: it does not support "
                                                      rf"sliding-window attention \(the model's window: {WINDOW}\)"):
        Engine(windowed, registry=limited_registry, attention="tp_windowless", config=EngineConfig(kv_cache_gib=0.02))
    with pytest.raises(BackendUnavailableError, match=r"'tp_uncapped' is not available: it does not support "
                                                      r"attention logit soft-capping \(the model caps scores "
                                                      r"at 20.0\)"):
        Engine(windowed, registry=limited_registry, attention="tp_uncapped", config=EngineConfig(kv_cache_gib=0.02))
    with pytest.warns(AttentionFallbackWarning, match="'tp_windowless' cannot run.*'tp_uncapped' cannot run"):
        engine = Engine(windowed, registry=limited_registry, config=EngineConfig(kv_cache_gib=0.02))
    try:
        assert engine.backends["attention"] == "paged"
    finally:
        engine.close()
    plain = Engine(llm_bf16.loaded, registry=limited_registry, config=EngineConfig(kv_cache_gib=0.02))
    try:  # a model without windows or a cap runs on them
        assert plain.backends["attention"] == "tp_windowless"
    finally:
        plain.close()
