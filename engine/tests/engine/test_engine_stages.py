"""The step as a pipeline: each stage runs once per step, a plain step and a verification go through
the same select stage, and the profiling entry (``timed_stages``) leaves the engine as it found it."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from pyagent_engine.api.llm import LLM
from pyagent_engine.core.engine import Engine
from pyagent_engine.requests.params import SamplingParams
from pyagent_engine.spec.config import SpeculativeConfig
from pyagent_engine.stages.records import MaskedLogits, Selection
from pyagent_engine.stages.timing import timed_stages

STAGES = ["schedule", "inputs", "forward", "masks", "select", "logprobs", "commit", "append"]
REPEATING = "a b c d e f g a b c d e f g a b c"
"""Raw text that ends by repeating itself: the ngram proposer drafts from the first decode step."""


def decode_to_second_step(engine: Engine, prompt: list[int]) -> None:
    """Add a greedy request and run its prefill (the next step decodes)."""
    engine.add_request(prompt, SamplingParams(temperature=0.0, max_tokens=16, ignore_eos=True))
    engine.step()


def test_every_stage_runs_once_per_step_and_the_wrappers_go_away(llm_bf16: LLM) -> None:
    engine = Engine(llm_bf16.loaded)
    assert list(engine.stages) == STAGES
    decode_to_second_step(engine, llm_bf16.encode("Once upon a time")[0])
    with timed_stages(engine.stages) as times:
        engine.step()
    assert times.calls == dict.fromkeys(STAGES, 1)
    assert all(seconds >= 0 for seconds in times.seconds.values())
    assert not any("run" in vars(stage) for stage in engine.stages.values()), "a stage kept its timing wrapper"
    engine.step()
    assert times.calls == dict.fromkeys(STAGES, 1), "stages were timed outside the block"


class Selections:
    """Wraps a select stage's ``run``, keeping each selection and the rows it was chosen from."""

    def __init__(self, run: object) -> None:
        self.run = run
        self.seen: list[tuple[int, Selection]] = []

    def __call__(self, masked: MaskedLogits, chain: object) -> Selection:
        selection = self.run(masked, chain)  # type: ignore[operator]
        self.seen.append((masked.rows.num_rows, selection))
        return selection


def selections(engine: Engine, prompt: list[int], steps: int, monkeypatch: pytest.MonkeyPatch) -> Sequence[
        tuple[int, Selection]]:
    decode_to_second_step(engine, prompt)
    spy = Selections(engine.select.run)
    monkeypatch.setattr(engine.select, "run", spy)
    for _ in range(steps):
        engine.step()
    return spy.seen


def test_plain_steps_and_verification_share_the_select_stage(llm_bf16: LLM, monkeypatch: pytest.MonkeyPatch) -> None:
    prompt = llm_bf16.encode(REPEATING)[0]
    plain = selections(Engine(llm_bf16.loaded), prompt, 15, monkeypatch)
    assert all(rows == 1 and len(s.tokens[0]) == 1 and s.accepted == ((),) for rows, s in plain)
    config = SpeculativeConfig(proposer="ngram", num_draft_tokens=4, adaptive=False)
    drafted = selections(Engine(llm_bf16.loaded, speculative=config), prompt, 3, monkeypatch)
    verified = [(rows, s) for rows, s in drafted if rows > 1]
    assert verified, "the ngram proposer drafted nothing for a repeating prompt"
    for rows, selection in verified:  # every accepted node adds a token, chosen at the row after that node
        (tokens,), (accepted,), (chosen_at,) = selection.tokens, selection.accepted, selection.rows
        assert len(tokens) == 1 + len(accepted) and chosen_at == (0, *(1 + node for node in accepted))
        assert max(chosen_at) < rows
    emitted = [token for _, s in plain for token in s.tokens[0]]
    verified_tokens = [token for _, s in drafted for token in s.tokens[0]]
    assert verified_tokens == emitted[:len(verified_tokens)], "verification changed greedy tokens"
