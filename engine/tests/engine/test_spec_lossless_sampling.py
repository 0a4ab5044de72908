"""Rejection sampling is lossless on the real model: sampled tokens are distributed as without speculation.

Many short seeded generations (temperature 1) run without speculation and with the ``suffix``
proposer, with the same seeds in both arms. Two raw prompts end by repeating earlier text, so
drafts start at the first decode step: a cycle (``CHAIN_PROMPT``: one earlier continuation, chain
drafts) and a sentence seen with two continuations (``TREE_PROMPT``: the proposer drafts both as
siblings, so tree verification and the tree attention mask are exercised).

For every output position a draft can cover (the first token comes from the prefill) and every
token seen at least ``MIN_COUNT`` times there, an exact sign test (McNemar) compares how often the
two arms drew that token from the same seed. Under equal marginal distributions the two kinds of
discordant pair are equally likely whatever the dependence inside a pair, so the test is valid for
any lossless verifier, whatever its use of the seeds; every p-value must exceed ``ALPHA`` over the
number of tests (Bonferroni). With fixed seeds the run is deterministic: one that passes keeps
passing.

The bound is not vacuous: a lossy verifier that accepts a draft token with probability p(x) but on
rejection draws again from p instead of from the residual (so the draft token comes out with
probability 1 - (1 - p(x))^2), run with the ``ngram`` proposer, must fail it by a factor of 10.
(Drafts here are deterministic, so q is a point mass and min(1, p/q) is p: accepting with p and
skipping the residual is the bug to catch.)
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Sequence

import pytest
import torch

from pyagent_core.interfaces.proposer import ROOT, DraftTree, ProposerRequest
from pyagent_engine.api.llm import LLM
from pyagent_engine.core.config import EngineConfig
from pyagent_engine.core.engine import Engine
from pyagent_engine.requests.params import SamplingParams
from pyagent_engine.requests.request import Request
from pyagent_engine.spec.config import SpeculativeConfig
from pyagent_engine.spec.decoder import SpeculativeDecoder
from pyagent_engine.stages.records import MaskedLogits, Selection
from pyagent_sampler_host.host import SamplerHost

CHAIN_PROMPT = "a b c d e f g a b c d e f g a b c"
"""17 tokens (one full KV block is shared through the prefix cache)."""
TREE_PROMPT = "the big dog ran home. the big cat sat down. the big dog ran home. the"
GROUPS = ((CHAIN_PROMPT, 160), (TREE_PROMPT, 80))
"""Each prompt and how many seeds run it."""
MAX_TOKENS = 4
ALPHA = 1e-4
MIN_COUNT = 10
CONFIG = EngineConfig(max_num_seqs=sum(n for _, n in GROUPS), max_num_batched_tokens=2048,
                      prefix_caching=True, kv_cache_gib=0.25)
SAMPLERS = "temperature"
"""The chain's processors: the other defaults are no-ops at these parameters and only cost time."""
SUFFIX = SpeculativeConfig(proposer="suffix", options={"max_depth": 3, "global_max_tokens": 0},
                           num_draft_tokens=3, adaptive=False)
"""Tree drafts: a match depth of 3 makes both earlier continuations of ``TREE_PROMPT``'s end tie."""
NGRAM = SpeculativeConfig(proposer="ngram", num_draft_tokens=3, adaptive=False)

Outputs = list[list[list[int]]]
"""Per prompt group, the output of each of its seeds."""


def sign_test_p_value(first: Sequence[int], second: Sequence[int], token: int) -> float:
    """Exact two-sided sign test on paired samples that ``token`` is as frequent in both.

    Only pairs where exactly one side drew ``token`` count: under equal marginals, "gained" and
    "lost" pairs are equally likely (Binomial(n, 1/2)) whatever the dependence within a pair.
    """
    gained = sum(a != token and b == token for a, b in zip(first, second, strict=True))
    lost = sum(a == token and b != token for a, b in zip(first, second, strict=True))
    n, k = gained + lost, min(gained, lost)
    return min(1.0, 2 * sum(math.comb(n, i) for i in range(k + 1)) / 2**n)


def p_values(expected: Outputs, got: Outputs) -> list[float]:
    """A sign-test p-value per (prompt group, drafted position, frequent token)."""
    found = []
    for group_expected, group_got in zip(expected, got, strict=True):
        for position in range(1, MAX_TOKENS):
            first, second = [o[position] for o in group_expected], [o[position] for o in group_got]
            pooled = Counter(first) + Counter(second)
            found += [sign_test_p_value(first, second, t) for t, count in pooled.items() if count >= MIN_COUNT]
    return found


def generate(engine: Engine, prompts: Sequence[list[int]]) -> Outputs:
    """Every group's seeded generations, submitted together after greedy runs warmed the prefix cache."""
    for prompt in prompts:
        engine.add_request(prompt, SamplingParams(max_tokens=1, temperature=0.0))
    while engine.has_unfinished():
        engine.step()
    requests = [[engine.add_request(prompt, SamplingParams(max_tokens=MAX_TOKENS, temperature=1.0, seed=seed,
                                                           ignore_eos=True)) for seed in range(count)]
                for prompt, (_, count) in zip(prompts, GROUPS, strict=True)]
    while engine.has_unfinished():
        engine.step()
    return [[list(r.output_token_ids) for r in group] for group in requests]


class TreeCounter:
    """Wraps a proposer's ``propose`` and counts the drafts that branch."""

    def __init__(self, propose: Callable[[Sequence[ProposerRequest], int], list[DraftTree | None]]) -> None:
        self.propose = propose
        self.trees = 0

    def __call__(self, requests: Sequence[ProposerRequest], max_tokens: int) -> list[DraftTree | None]:
        """The wrapped proposer's drafts."""
        drafts = self.propose(requests, max_tokens)
        self.trees += sum(d is not None and not d.is_chain() for d in drafts)
        return drafts


def run_arm(llm: LLM, prompts: Sequence[list[int]], config: SpeculativeConfig,
            monkeypatch: pytest.MonkeyPatch, lossy: bool = False) -> tuple[Outputs, SpeculativeDecoder, TreeCounter]:
    """Generate with ``config``'s speculation (``lossy``: through :class:`NoResidual`); check it drafted enough."""
    engine = Engine(llm.loaded, config=CONFIG, samplers=SAMPLERS, speculative=config)
    decoder = engine.speculative
    assert decoder is not None
    counter = TreeCounter(decoder.proposer.propose)
    monkeypatch.setattr(decoder.proposer, "propose", counter)
    if lossy:
        select: Callable[..., Selection] = engine.select.run

        def lossy_select(masked: MaskedLogits, host: SamplerHost[Request]) -> Selection:
            return select(masked, NoResidual(host, masked.rows.requests))

        monkeypatch.setattr(engine.select, "run", lossy_select)
    outputs = generate(engine, prompts)
    stats = decoder.stats
    seeds = sum(n for _, n in GROUPS)
    assert stats.num_drafts >= seeds // 2, f"only {stats.num_drafts} drafts: the prompts no longer make drafts"
    rate = stats.num_accepted_tokens / stats.num_draft_tokens
    assert lossy or 0.1 < rate < 0.9, f"acceptance rate {rate:.2f}: too one-sided to test rejection sampling"
    return outputs, decoder, counter


@pytest.fixture(scope="module")
def prompts(llm_bf16: LLM) -> list[list[int]]:
    """The prompts' token ids."""
    return [llm_bf16.encode(text)[0] for text, _ in GROUPS]


@pytest.fixture(scope="module")
def baseline(llm_bf16: LLM, prompts: list[list[int]]) -> Outputs:
    """The generations without speculation."""
    return generate(Engine(llm_bf16.loaded, config=CONFIG, samplers=SAMPLERS), prompts)


def test_sampled_tokens_are_distributed_as_without_speculation(
        llm_bf16: LLM, prompts: list[list[int]], baseline: Outputs, monkeypatch: pytest.MonkeyPatch) -> None:
    outputs, _, counter = run_arm(llm_bf16, prompts, SUFFIX, monkeypatch)
    assert counter.trees >= GROUPS[1][1] // 2, f"only {counter.trees} tree drafts"
    found = p_values(baseline, outputs)
    assert min(found) > ALPHA / len(found), (
        f"p = {min(found):.2e} over {len(found)} tests: speculation changed the token distribution")


class NoResidual:
    """The engine's sampler host as a lossy verifier would use it: two draws per row; where the
    request's walk sits on a draft node, the first draw is kept if it is one of the node's children
    (accepted with probability p(x)), and otherwise the second draw - from p, not from the residual."""

    def __init__(self, chain: SamplerHost[Request], requests: Sequence[Request]) -> None:
        self.chain = chain
        self.start = {id(r): len(r.output_token_ids) for r in requests}

    def _children(self, request: Request) -> set[int]:
        draft, node = request.draft, ROOT
        if draft is None:
            return set()
        for token in request.output_token_ids[self.start[id(request)]:]:
            matches = [c for c in draft.children(node) if draft.token_ids[c] == token]
            if not matches:  # the walk ended; this row's draw is not used
                return set()
            node = matches[0]
        return {draft.token_ids[c] for c in draft.children(node)}

    def greedy_rows(self, requests: Sequence[Request], logits: torch.Tensor, whole: bool = False) -> None:
        """Never a plain argmax: the requests here sample."""
        return None

    def sample(self, requests: Sequence[Request], logits: torch.Tensor) -> list[int]:
        """One token per row, as above."""
        first = self.chain.sample(requests, logits.clone())
        second = self.chain.sample(requests, logits.clone())
        return [a if a in self._children(r) else b for r, a, b in zip(requests, first, second, strict=True)]


def test_the_bound_rejects_verification_without_the_residual(
        llm_bf16: LLM, prompts: list[list[int]], baseline: Outputs, monkeypatch: pytest.MonkeyPatch) -> None:
    outputs, _, _ = run_arm(llm_bf16, prompts, NGRAM, monkeypatch, lossy=True)
    found = p_values(baseline, outputs)
    assert min(found) < ALPHA / len(found) / 10, (
        f"p = {min(found):.2e} over {len(found)} tests: the bound cannot tell a lossy verifier")
