"""Tree drafts accepted along a later branch: the accepted nodes' keys and values move to the right slots.

An oracle proposer knows the greedy output and drafts trees whose first branch is wrong and whose
later branch is right, so every accepted node sits at a draft index other than its depth and its
cache entries must be moved. Greedy output must equal the output without speculation, with every
right node accepted, and no KV block may leak.
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from pyagent_core.interfaces.proposer import DraftTree, Proposer, ProposerContext, ProposerRequest
from pyagent_engine.api.llm import LLM
from pyagent_engine.core.config import EngineConfig
from pyagent_engine.core.engine import Engine
from pyagent_engine.requests.params import SamplingParams
from pyagent_engine.spec.config import SpeculativeConfig

MAX_TOKENS = 40
CONFIG = EngineConfig(block_size=16)


class WrongBranchFirst(Proposer):
    """Drafts ``[w0, r0, w1, r1, r2]`` with parents ``[root, root, r0, r0, r1]``: wrong guesses w come
    first at each branching, the right tokens r (the expected output) come later."""

    def __init__(self, expected: Sequence[int], context: ProposerContext) -> None:
        super().__init__({}, context)
        self.expected = list(expected)

    def propose(self, requests: Sequence[ProposerRequest], max_tokens: int) -> list[DraftTree | None]:
        """One five-node tree per request while five nodes are allowed and three tokens remain."""
        drafts: list[DraftTree | None] = []
        for request in requests:
            done = len(request.output_token_ids)
            right = self.expected[done:done + 3]
            if max_tokens < 5 or len(right) < 3:
                drafts.append(None)
                continue
            wrong = [(t + 1) % 1000 for t in right]
            drafts.append(DraftTree([wrong[0], right[0], wrong[1], right[1], right[2]], [-1, -1, 1, 1, 3]))
        return drafts


def generate(engine: Engine, prompt: list[int]) -> list[int]:
    """Greedy output of ``prompt``."""
    request = engine.add_request(prompt, SamplingParams(max_tokens=MAX_TOKENS, temperature=0.0, ignore_eos=True))
    while engine.has_unfinished():
        engine.step()
    return list(request.output_token_ids)


@pytest.mark.parametrize("text", ["Write a haiku about autumn.", "Why is the sky blue?"])
def test_accepting_a_later_branch_keeps_the_output_exact(llm_bf16: LLM, text: str) -> None:
    prompt = llm_bf16.encode(text, chat=True)[0]
    expected = generate(Engine(llm_bf16.loaded, config=CONFIG), prompt)
    engine = Engine(llm_bf16.loaded, config=CONFIG,
                    speculative=SpeculativeConfig(proposer="suffix", num_draft_tokens=5, adaptive=False))
    assert engine.speculative is not None
    engine.speculative.proposer = WrongBranchFirst(expected, engine.speculative.proposer.context)
    assert generate(engine, prompt) == expected
    stats = engine.speculative.stats
    assert stats.num_drafts > 0 and stats.num_accepted_tokens == 3 * stats.num_drafts, (
        "a right branch was rejected: the moved keys and values are not the accepted tokens'")
    assert engine.scheduler.kv.num_free == engine.num_blocks, "blocks of rejected nodes leaked"
