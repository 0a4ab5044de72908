"""Verification of drafts without a model (the select stage over a draft's rows): losslessness (chi-square),
greedy exact match, trees, bad drafts."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Sequence

import pytest
import torch

from pyagent_core import ProposerSpec, hookimpl
from pyagent_core.errors import ConfigError
from pyagent_core.interfaces.proposer import DraftTree, Proposer, ProposerContext, ProposerRequest
from pyagent_core.kinds import ATTENTION
from pyagent_core.registry import Registry, get_registry
from pyagent_engine.requests.params import SamplingParams
from pyagent_engine.requests.request import Request
from pyagent_engine.sampling.host import sampler_host
from pyagent_engine.spec.config import SpeculativeConfig
from pyagent_engine.spec.controller import DraftController
from pyagent_engine.spec.decoder import DraftWarning, SpecStats, SpeculativeDecoder
from pyagent_engine.spec.tree import tree_mask
from pyagent_engine.stages.records import MaskedLogits, SampledRows, Selection
from pyagent_engine.stages.select import SelectTokens
from pyagent_sampler_host.host import SamplerHost

VOCAB = 5
MAX_MODEL_LEN = 100
LOGITS = torch.tensor([[1.0, 0.2, 1.5, -0.5, 0.0],   # after the last real token
                       [0.3, 1.2, -1.0, 0.8, 0.1],   # after draft node 0
                       [0.0, 0.0, 2.0, 0.5, -2.0],   # after draft node 1
                       [1.0, -1.0, 0.0, 0.0, 0.7]])  # after draft node 2
CHI2_CRITICAL_DF4_P001 = 18.467  # chi-square quantile 0.999 with 4 degrees of freedom


def chi_square(counts: Counter[int], probs: torch.Tensor) -> float:
    total = sum(counts.values())
    return sum((counts.get(t, 0) - total * float(p)) ** 2 / (total * float(p)) for t, p in enumerate(probs))


def verify(requests: Sequence[Request], logits: torch.Tensor, chain: SamplerHost[Request]) -> Selection:
    """The select stage over ``logits``: ``1 + len(draft)`` rows per request of ``requests``, in order."""
    return SelectTokens("raw").run(MaskedLogits(SampledRows.of(requests), logits), chain)


def run(draft: DraftTree | None, trials: int, temperature: float = 1.0) -> list[list[int]]:
    """Verify ``draft`` against LOGITS for ``trials`` fresh seeded requests; the emitted tokens of each."""
    chain = sampler_host(get_registry(), VOCAB)
    emitted = []
    for seed in range(trials):
        request = Request(f"r{seed}", [0], SamplingParams(temperature=temperature, seed=seed))
        request.draft = draft
        rows = LOGITS[: 1 + (0 if draft is None else len(draft))]
        (tokens,) = verify([request], rows.clone(), chain).tokens
        emitted.append(list(tokens))
        assert request.output_token_ids == []
    return emitted


def test_chain_verification_is_lossless() -> None:
    """First emitted token ~ softmax(row 0); given it equals draft[0], the next ~ softmax(row 1)."""
    emitted = run(DraftTree.chain([2, 1, 2]), 3000)
    first = Counter(tokens[0] for tokens in emitted)
    assert chi_square(first, LOGITS[0].softmax(0)) < CHI2_CRITICAL_DF4_P001
    second = Counter(tokens[1] for tokens in emitted if tokens[0] == 2)
    assert chi_square(second, LOGITS[1].softmax(0)) < CHI2_CRITICAL_DF4_P001
    assert all(len(t) == 1 or t[0] == 2 for t in emitted), "a rejected first draft token must end the walk"
    acceptance = sum(t[0] == 2 for t in emitted) / len(emitted)
    assert abs(acceptance - float(LOGITS[0].softmax(0)[2])) < 0.04, "acceptance must be p(draft) for a point mass"


def test_tree_verification_is_lossless() -> None:
    """Two candidates at the root: still every first token ~ softmax(row 0); after node 1 (token 0), row 3."""
    draft = DraftTree([2, 0, 1], [-1, -1, 1])
    emitted = run(draft, 3000)
    assert chi_square(Counter(t[0] for t in emitted), LOGITS[0].softmax(0)) < CHI2_CRITICAL_DF4_P001
    after_zero = Counter(t[1] for t in emitted if t[0] == 0)
    assert chi_square(after_zero, LOGITS[2].softmax(0)) < CHI2_CRITICAL_DF4_P001


def test_greedy_accepts_exactly_the_argmax_prefix_plus_one() -> None:
    (tokens,) = run(DraftTree.chain([2, 1, 2]), 1, temperature=0.0)
    assert tokens == [2, 1, 2, 0]  # every node is its row's argmax, then the bonus token of row 3
    (tokens,) = run(DraftTree.chain([2, 3, 2]), 1, temperature=0.0)
    assert tokens == [2, 1]  # node 1 (3) is not row 1's argmax (1): the correction ends the walk
    (tokens,) = run(None, 1, temperature=0.0)
    assert tokens == [2]


def test_greedy_verification_chooses_all_rows_at_once_unless_a_processor_is_on(
        monkeypatch: pytest.MonkeyPatch) -> None:
    chain = sampler_host(get_registry(), VOCAB)
    calls: list[int] = []
    sample = chain.sample
    monkeypatch.setattr(chain, "sample", lambda requests, logits: calls.append(1) or sample(requests, logits))
    tree = DraftTree([0, 2, 1, 2], [-1, -1, 1, 2])  # token 0 is rejected at the root; 2 -> 1 -> 2 is the argmax path
    plain = Request("plain", [0], SamplingParams(temperature=0.0))
    biased = Request("biased", [0], SamplingParams(temperature=0.0, extra={"logit_bias": {1: -10.0}}))
    for request in (plain, biased):
        request.draft = tree
    rows = torch.cat([LOGITS[:1], LOGITS[:1], LOGITS[1:]])  # row 1 + i follows node i; node 0's row is never read
    selection = verify([plain], rows.clone(), chain)
    assert (selection.tokens, selection.accepted, calls) == (((2, 1, 2, 0),), ((1, 2, 3),), [])  # one argmax
    assert selection.rows == ((0, 2, 3, 4),)  # the row each token was chosen at: after the root, nodes 1, 2, 3
    selection = verify([biased], rows.clone(), chain)
    assert (selection.tokens, selection.accepted) == (((2, 3),), ((1,),)) and calls  # the bias makes 3 row 2's choice
    assert selection.rows == ((0, 2),)


def test_tree_mask_lets_nodes_see_their_ancestors_only() -> None:
    class Chunk:
        def __init__(self, draft: DraftTree | None, num_tokens: int) -> None:
            self.request = Request("r", [1], SamplingParams())
            self.request.draft = draft
            self.num_tokens = num_tokens

    draft = DraftTree([5, 6, 7], [-1, -1, 0])
    mask = tree_mask([Chunk(None, 2), Chunk(draft, 4)], 4)
    assert mask is not None
    assert mask[:2].tolist() == [[True, False, False, False], [True, True, False, False]]
    assert mask[2:].tolist() == [[True, False, False, False], [True, True, False, False],
                                 [True, False, True, False], [True, True, False, True]]
    assert tree_mask([Chunk(DraftTree.chain([1, 2]), 3)], 3) is None


def test_controller_budgets_by_acceptance_and_plans_whole_paths() -> None:
    controller = DraftController(8)
    for _ in range(20):
        controller.verified("bad", 0, 4)
        controller.verified("good", 4, 4)
    threshold = 0.2
    assert controller.budget("good", threshold) > controller.budget("bad", threshold) == 0
    assert DraftController(8, adaptive=False).budget("bad", 0.99) == 8
    # node 3 scores above its parent 2: it counts as no more likely than node 2, so a plan that
    # drops node 2 drops it too (and never keeps a node without its parent)
    draft = DraftTree([1, 2, 3, 4], [-1, 0, -1, 2], [1.0, 0.9, 0.01, 0.9])
    assert controller.probabilities("good", draft)[3] == controller.probabilities("good", draft)[2]
    (planned,) = controller.plan([("good", draft, 8)], batch=1)
    assert planned is not None and planned.token_ids == (1, 2)


def test_non_positive_draft_length_is_an_error() -> None:
    for bad in (0, -3):
        with pytest.raises(ConfigError, match="num_draft_tokens"):
            SpeculativeConfig(proposer="ngram", num_draft_tokens=bad)


class Misbehaving(Proposer):
    """Returns whatever draft it was built with."""

    def __init__(self, draft: object, context: ProposerContext) -> None:
        super().__init__({}, context)
        self.draft = draft

    def propose(self, requests: Sequence[ProposerRequest], max_tokens: int) -> list[DraftTree | None]:
        return [self.draft for _ in requests]  # type: ignore[misc]


@pytest.mark.parametrize(("draft", "message"), [
    (DraftTree.chain([1, VOCAB]), "outside the vocabulary"),
    (DraftTree.chain([1] * 9), "at most"),
    (DraftTree([1, 2], [-1, -1]), "tree=False"),
    ("tokens", "instead of a DraftTree"),
    # DraftTree.trusted skips the constructor's checks; the engine runs them
    (DraftTree.trusted((1, 2), (-1, 1)), r"invalid draft tree \(parent of draft node 1 is 1"),
    (DraftTree.trusted((1, -2), (-1, 0)), r"invalid draft tree \(draft token ids must be non-negative"),
    (DraftTree.trusted((), ()), r"invalid draft tree \(a draft tree needs at least one node"),
])
def test_bad_drafts_are_dropped_with_a_warning(draft: object, message: str) -> None:
    decoder = SpeculativeDecoder(get_registry(), SpeculativeConfig(proposer="ngram", num_draft_tokens=8,
                                                                  adaptive=False), VOCAB, MAX_MODEL_LEN)
    decoder.proposer = Misbehaving(draft, decoder.proposer.context)
    request = Request("r", [1, 2], SamplingParams(max_tokens=20))
    request.num_computed_tokens = 1
    with pytest.warns(DraftWarning, match=message):
        decoder.propose([request], context=100)
    assert request.draft is None and decoder.stats.num_dropped == 1


def test_mean_accepted_length_counts_the_bonus_token() -> None:
    counters = SpecStats()
    counters.record(4, 2)
    counters.record(4, 0)
    stats = counters.as_dict()
    assert stats["accepted_per_position"] == [1, 1] and math.isclose(stats["mean_accepted_length"], 2.0)
    assert math.isclose(stats["acceptance_rate"], 0.25)


class ContextKeeper(Proposer):
    """Drafts nothing; the engine-built context stays in ``self.context``."""

    def propose(self, requests: Sequence[ProposerRequest], max_tokens: int) -> list[DraftTree | None]:
        return [None for _ in requests]


def keeper_registry(needs_model: bool) -> Registry:
    """A registry holding only the ``keeper`` proposer (a :class:`ContextKeeper`)."""
    spec = ProposerSpec(name="keeper", impl=f"{__name__}:ContextKeeper", summary="Keeps its context.",
                        needs_model=needs_model)

    class Plugin:
        @staticmethod
        @hookimpl
        def pyagent_register_proposers(register: Callable[[ProposerSpec], None]) -> None:
            register(spec)

    return Registry(environ={}, entry_points=[], plugins=[("keeper", Plugin())]).load_plugins()


@pytest.mark.parametrize("needs_model", [False, True])
def test_the_proposer_is_built_with_options_and_a_context(needs_model: bool) -> None:
    registry, target = keeper_registry(needs_model), object()
    attention = get_registry().select(ATTENTION)
    decoder = SpeculativeDecoder(registry, SpeculativeConfig(proposer="keeper"), VOCAB, MAX_MODEL_LEN,
                                 target=target, attention=attention)
    context = decoder.proposer.context
    assert isinstance(decoder.proposer, ContextKeeper) and decoder.proposer.options == {}
    assert (context.vocab_size, context.max_model_len) == (VOCAB, MAX_MODEL_LEN)
    expected = (target, registry, attention) if needs_model else (None, None, None)
    assert (context.target, context.registry, context.attention) == expected


def test_a_proposer_that_needs_the_model_without_a_target_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="'keeper' drafts with a model and needs the target model"):
        SpeculativeDecoder(keeper_registry(True), SpeculativeConfig(proposer="keeper"), VOCAB, MAX_MODEL_LEN)
