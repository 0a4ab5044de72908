"""pyagent's ngram and suffix proposers as vLLM custom_class proposers: they draft (vLLM's spec-decode
counters move) and greedy tokens stay those of vLLM without speculation.

vLLM builds no custom logits processors when speculative decoding is on, so these engines also run
without the adapter's processors: their tokens equal the adapter engine's with its processors idle.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("vllm")

N = 24
PROMPTS = ("one two three four, one two three four, one two three", "def fib(n):")


def greedy(llm: Any, ids: list[list[int]]) -> list[list[int]]:
    from vllm import SamplingParams

    params = SamplingParams(temperature=0.0, max_tokens=N, ignore_eos=True)
    return [list(o.outputs[0].token_ids) for o in llm.generate([{"prompt_token_ids": i} for i in ids], params,
                                                                use_tqdm=False)]


def counter(llm: Any, name: str) -> float:
    return sum(float(getattr(m, "value", 0)) for m in llm.get_metrics() if m.name == name)


@pytest.fixture(scope="module")
def prompts_and_plain(vllm_llm: Any, pyagent_llm: Any) -> tuple[list[list[int]], list[list[int]]]:
    """The prompts' ids and vLLM's greedy tokens without speculation (before any other engine runs)."""
    ids = [pyagent_llm.tokenizer.encode(p) for p in PROMPTS]
    return ids, greedy(vllm_llm, ids)


@pytest.mark.parametrize("proposer", ["NgramProposer", "SuffixProposer"])
def test_proposer_drafts_and_leaves_greedy_tokens_unchanged(model_dir: Path, make_vllm: Any, proposer: str,
                                                            prompts_and_plain: Any) -> None:
    ids, plain = prompts_and_plain
    llm = make_vllm(model_dir, disable_log_stats=False, speculative_config={
        "method": "custom_class", "model": f"pyagent_vllm.proposers.{proposer}", "num_speculative_tokens": 4})
    assert greedy(llm, ids) == plain
    drafted = counter(llm, "vllm:spec_decode_num_draft_tokens")
    accepted = counter(llm, "vllm:spec_decode_num_accepted_tokens")
    assert drafted > 0 and accepted > 0, (drafted, accepted)
