"""Speculative decoding on the embedded model: greedy output identical to no speculation, bad proposers harmless."""

from __future__ import annotations

import json
import warnings
from collections.abc import Sequence

import pytest

from pyagent_core.interfaces.proposer import DraftTree, Proposer, ProposerContext, ProposerRequest
from pyagent_engine.api.llm import LLM
from pyagent_engine.benchmarks.shared_data import SHARED_DATA
from pyagent_engine.core.engine import Engine
from pyagent_engine.requests.params import SamplingParams
from pyagent_engine.spec.config import SpeculativeConfig
from pyagent_engine.spec.decoder import DraftWarning

SPECBENCH = SHARED_DATA / "specbench" / "question.jsonl"
CATEGORIES = ("summarization", "coding")
MAX_TOKENS = 16


def specbench_prompts() -> list[str]:
    """The first question of a few Spec-Bench categories (skips when the data is absent)."""
    if not SPECBENCH.exists():
        pytest.skip(f"Spec-Bench data not found at {SPECBENCH}")
    firsts: dict[str, str] = {}
    for line in SPECBENCH.read_text(encoding="utf-8").splitlines():
        record = json.loads(line)
        firsts.setdefault(record["category"], record["turns"][0][:400])
    return [firsts[c] for c in CATEGORIES]


def run(engine: Engine, prompts: Sequence[list[int]]) -> list[list[int]]:
    """Greedy outputs of ``prompts`` run together on ``engine``."""
    return run_params(engine, prompts, SamplingParams(max_tokens=MAX_TOKENS, temperature=0.0))


def run_params(engine: Engine, prompts: Sequence[list[int]], params: SamplingParams) -> list[list[int]]:
    """Outputs of ``prompts`` run together on ``engine`` with ``params``."""
    requests = [engine.add_request(ids, params) for ids in prompts]
    while engine.has_unfinished():
        engine.step()
    return [list(r.output_token_ids) for r in requests]


@pytest.fixture(scope="module")
def baseline(llm_bf16: LLM) -> tuple[list[list[int]], list[list[int]]]:
    """The templated Spec-Bench prompts and their greedy outputs without speculation."""
    prompts = [llm_bf16.encode(p, chat=True)[0] for p in specbench_prompts()]
    return prompts, run(llm_bf16.engine, prompts)


@pytest.mark.parametrize("config", [
    SpeculativeConfig(proposer="ngram", num_draft_tokens=6),
    SpeculativeConfig(proposer="suffix", num_draft_tokens=8),
    SpeculativeConfig(proposer="suffix", options={"tree": False}, num_draft_tokens=8, adaptive=False),
], ids=["ngram", "suffix-tree", "suffix-chain-fixed"])
def test_greedy_output_is_identical_with_speculation(llm_bf16: LLM, baseline: tuple[list[list[int]], list[list[int]]],
                                                     config: SpeculativeConfig) -> None:
    prompts, expected = baseline
    engine = Engine(llm_bf16.loaded, speculative=config)
    assert run(engine, prompts) == expected
    stats = engine.speculative.stats if engine.speculative else None
    assert stats is not None and stats.num_drafts > 0, "the proposer never drafted on these prompts"
    assert engine.scheduler.kv.num_free == engine.num_blocks, "blocks of rejected drafts leaked"


class OutOfVocab(Proposer):
    """Drafts ids past the vocabulary, then too many tokens, alternately."""

    def __init__(self, context: ProposerContext) -> None:
        super().__init__({}, context)
        self.calls = 0

    def propose(self, requests: Sequence[ProposerRequest], max_tokens: int) -> list[DraftTree | None]:
        self.calls += 1
        ids = [10**6] if self.calls % 2 else [1] * (max_tokens + 3)
        return [DraftTree.chain(ids) for _ in requests]


def test_a_misbehaving_proposer_never_changes_the_output(
        llm_bf16: LLM, baseline: tuple[list[list[int]], list[list[int]]]) -> None:
    prompts, expected = baseline
    engine = Engine(llm_bf16.loaded, speculative=SpeculativeConfig(proposer="ngram", num_draft_tokens=4))
    assert engine.speculative is not None
    engine.speculative.proposer = OutOfVocab(engine.speculative.proposer.context)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert run(engine, prompts[:1]) == expected[:1]
    assert any(issubclass(w.category, DraftWarning) for w in caught)
    assert engine.speculative.stats.num_drafts == 0 and engine.speculative.stats.num_dropped > 0


class Oracle(Proposer):
    """Drafts a known greedy continuation, which goes on past the end-of-sequence token."""

    def __init__(self, context: ProposerContext, continuation: list[int]) -> None:
        super().__init__({}, context)
        self.continuation = continuation
        self.drafts: list[list[int]] = []

    def propose(self, requests: Sequence[ProposerRequest], max_tokens: int) -> list[DraftTree | None]:
        drafts: list[DraftTree | None] = []
        for request in requests:
            start = len(request.output_token_ids)
            self.drafts.append(self.continuation[start:start + max_tokens])
            drafts.append(DraftTree.chain(self.drafts[-1]))
        return drafts


def test_drafted_tokens_past_an_accepted_end_of_sequence_are_not_counted(llm_bf16: LLM) -> None:
    """A draft that runs past the end-of-sequence token is accepted whole, but only the tokens up to
    the end reach the output: only those count as drafted and accepted."""
    prompt = llm_bf16.encode("What is 2 + 2?", chat=True)[0]
    eos = set(llm_bf16.loaded.config.eos_token_ids)
    (past_the_end,) = run_params(llm_bf16.engine, [prompt], SamplingParams(max_tokens=40, temperature=0.0,
                                                                             ignore_eos=True))
    length = next(i for i, token in enumerate(past_the_end) if token in eos) + 1
    assert length <= 30, "the answer is too long for one draft"
    engine = Engine(llm_bf16.loaded, speculative=SpeculativeConfig(proposer="ngram", num_draft_tokens=length + 2,
                                                                   adaptive=False))
    assert engine.speculative is not None
    oracle = engine.speculative.proposer = Oracle(engine.speculative.proposer.context, past_the_end)
    (output,) = run_params(engine, [prompt], SamplingParams(max_tokens=40, temperature=0.0))
    assert output == past_the_end[:length]
    assert len(oracle.drafts) == 1 and len(oracle.drafts[0]) == length + 2  # 3 tokens past the end
    stats = engine.speculative.stats
    assert (stats.num_drafts, stats.num_draft_tokens, stats.num_accepted_tokens) == (1, length - 1, length - 1)
    assert stats.accepted_per_position == [1] * (length - 1)
