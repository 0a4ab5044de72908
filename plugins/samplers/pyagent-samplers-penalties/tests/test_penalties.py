"""The penalties processor: the conformance kit, transformers' repetition penalty, OpenAI-style
frequency/presence penalties over a brute-force recount, windows, and C equal to the fallback."""

from __future__ import annotations

import math
import random
from typing import Any, ClassVar

import pytest
import torch
from transformers import RepetitionPenaltyLogitsProcessor

from pyagent_core.interfaces.sampler import AddedRequest, BatchUpdate, MovedRequest, MoveKind, SamplerContext
from pyagent_core.testing.sampler import SamplerConformance
from pyagent_core.types import SamplerSpec
from pyagent_samplers_penalties import plugin
from pyagent_samplers_penalties.processor import PenaltiesProcessor

SPECS: list[SamplerSpec] = []
plugin.pyagent_register_samplers(register=SPECS.append)


class TestPenaltiesConformance(SamplerConformance):
    impl = PenaltiesProcessor
    spec = SPECS[0]
    request_params = (
        {"repetition_penalty": 1.3}, {"frequency_penalty": 0.7, "presence_penalty": -0.5},
        {"repetition_penalty": 0.8, "frequency_penalty": 2.0, "penalty_last_n": 2},
    )
    disabled_params = ({}, {"repetition_penalty": 1.0}, {"repetition_penalty": 1.5, "penalty_last_n": 0})
    invalid_request_params = (
        {"repetition_penalty": 0.0}, {"repetition_penalty": math.inf}, {"frequency_penalty": 2.5},
        {"presence_penalty": "0.1"}, {"penalty_last_n": -2}, {"penalty_last_n": 1.5},
    )


def run_steps(backend: str, requests: list[dict[str, Any]], vocab: int, steps: int,
              seed: int) -> list[torch.Tensor]:
    """Run a processor over ``steps`` steps; each step every request appends a random token; return
    the penalised logits of each step. Row 0 and the last row swap at step 2."""
    rng = random.Random(seed)
    processor = PenaltiesProcessor({"backend": backend}, SamplerContext(vocab))
    outputs = [[rng.randrange(vocab) for _ in range(rng.randrange(3))] for _ in requests]
    added = tuple(AddedRequest(i, r["params"], r["prompt"], outputs[i]) for i, r in enumerate(requests))
    processor.update_state(BatchUpdate(len(requests), added=added))
    rows = list(range(len(requests)))
    results = []
    for step in range(steps):
        if step == 2 and len(rows) > 1:
            processor.update_state(BatchUpdate(len(rows), moved=(MovedRequest(0, len(rows) - 1, MoveKind.SWAP),)))
            rows[0], rows[-1] = rows[-1], rows[0]
        else:
            processor.update_state(None)
        logits = torch.randn(len(rows), vocab, generator=torch.Generator().manual_seed(seed * 100 + step)) * 3
        by_row = processor.apply(logits.clone())
        results.append(by_row[torch.tensor([rows.index(i) for i in range(len(rows))])])
        for i in rows:
            outputs[i].append(rng.randrange(vocab))
    return results


def recount_expected(logits: torch.Tensor, prompt: list[int], output: list[int],
                     params: dict[str, Any]) -> torch.Tensor:
    """The penalties recomputed from scratch over the window, in float32 like the kernel."""
    x = logits.clone()
    rp = torch.tensor(params.get("repetition_penalty", 1.0), dtype=torch.float32)
    fp = torch.tensor(params.get("frequency_penalty", 0.0), dtype=torch.float32)
    pp = torch.tensor(params.get("presence_penalty", 0.0), dtype=torch.float32)
    last_n = params.get("penalty_last_n", -1)
    if last_n == 0:
        return x
    context = prompt + output
    start = max(0, len(context) - last_n) if last_n > 0 else 0
    window = context[start:]
    outs = [t for pos, t in enumerate(context) if pos >= max(start, len(prompt))]
    for token in set(window):
        v = x[token]
        if float(rp) != 1.0:
            v = v * rp if v < 0 else v / rp
        count = outs.count(token)
        if count:
            v = v - fp * torch.tensor(float(count))
            v = v - pp
        x[token] = v
    return x


@pytest.mark.parametrize("backend", ["c", "torch"])
def test_incremental_counts_match_a_recount(backend: str) -> None:
    vocab, seed = 40, 7
    requests = [
        {"params": {"repetition_penalty": 1.4, "frequency_penalty": 0.5, "presence_penalty": 0.25},
         "prompt": [1, 2, 2, 3]},
        {"params": {"repetition_penalty": 0.9, "frequency_penalty": -0.3, "penalty_last_n": 4},
         "prompt": [5, 6, 7, 8, 9]},
        {"params": {"presence_penalty": 1.0, "penalty_last_n": 1}, "prompt": []},
        {"params": {"repetition_penalty": 2.0, "penalty_last_n": 0}, "prompt": [1]},
    ]
    results = run_steps(backend, requests, vocab, steps=6, seed=seed)
    # replay the same token stream to know each request's history at each step
    rng = random.Random(seed)
    outputs = [[rng.randrange(vocab) for _ in range(rng.randrange(3))] for _ in requests]
    rows = list(range(len(requests)))
    for step in range(6):
        if step == 2:
            rows[0], rows[-1] = rows[-1], rows[0]
        logits = torch.randn(len(rows), vocab, generator=torch.Generator().manual_seed(seed * 100 + step)) * 3
        for i, request in enumerate(requests):
            want = recount_expected(logits[rows.index(i)], request["prompt"], outputs[i], request["params"])
            assert torch.equal(results[step][i], want), f"request {i} at step {step}"
        for i in rows:
            outputs[i].append(rng.randrange(vocab))


@pytest.mark.parametrize("backend", ["c", "torch"])
def test_windowless_rows_take_the_one_token_step(backend: str) -> None:
    """Rows without a window that gain one token per step (the processor's fast path), also after a
    step that adds two tokens to one row (the general path), match a recount."""
    vocab, seed = 30, 3
    requests = [{"params": {"repetition_penalty": 1.7, "frequency_penalty": 0.4}, "prompt": [1, 2, 3]},
                {"params": {"presence_penalty": -0.5}, "prompt": [4, 4]}]
    processor = PenaltiesProcessor({"backend": backend}, SamplerContext(vocab))
    outputs: list[list[int]] = [[], [7]]
    added = tuple(AddedRequest(i, r["params"], r["prompt"], outputs[i]) for i, r in enumerate(requests))
    processor.update_state(BatchUpdate(2, added=added))
    rng = random.Random(seed)
    for step in range(6):
        logits = torch.randn(2, vocab, generator=torch.Generator().manual_seed(step)) * 3
        got = processor.apply(logits.clone())
        for i, request in enumerate(requests):
            assert torch.equal(got[i], recount_expected(logits[i], request["prompt"], outputs[i], request["params"]))
        for i in range(2):
            outputs[i].append(rng.randrange(vocab))
        if step == 3:
            outputs[0].append(rng.randrange(vocab))


def test_repetition_matches_transformers() -> None:
    """HF's RepetitionPenaltyLogitsProcessor over prompt + output ids, on random scores."""
    vocab = 100
    gen = torch.Generator().manual_seed(3)
    for penalty in (1.3, 0.7, 2.0):
        ids = torch.randint(0, vocab, (3, 25), generator=gen)
        scores = torch.randn(3, vocab, generator=gen) * 4
        want = RepetitionPenaltyLogitsProcessor(penalty)(ids, scores.clone())
        processor = PenaltiesProcessor({"repetition_penalty": penalty}, SamplerContext(vocab))
        added = tuple(AddedRequest(r, {}, ids[r, :10].tolist(), ids[r, 10:].tolist()) for r in range(3))
        processor.update_state(BatchUpdate(3, added=added))
        torch.testing.assert_close(processor.apply(scores.clone()), want, rtol=0, atol=0)


def test_bad_option_is_rejected() -> None:
    with pytest.raises(ValueError, match="frequency_penalty=3"):
        PenaltiesProcessor({"frequency_penalty": 3}, SamplerContext(10))


class TestNothingToPenalise:
    """A request with no prompt and no output leaves its row unchanged (nothing seen yet)."""

    backends: ClassVar[tuple[str, ...]] = ("c", "torch")

    def test_empty_history(self) -> None:
        for backend in self.backends:
            processor = PenaltiesProcessor({"backend": backend, "repetition_penalty": 1.5}, SamplerContext(8))
            processor.update_state(BatchUpdate(1, added=(AddedRequest(0, {}, (), []),)))
            logits = torch.randn(1, 8)
            assert torch.equal(processor.apply(logits.clone()), logits)
