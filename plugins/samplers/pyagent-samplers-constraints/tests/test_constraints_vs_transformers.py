"""The bans give transformers' masked logits (no-repeat-ngram, bad words, suppress tokens, min new
tokens / min length) and its sequence bias for one-token biases, on random contexts and rows."""

from __future__ import annotations

import random

import pytest
import torch

from pyagent_core.interfaces.sampler import AddedRequest, BatchUpdate, SamplerContext
from pyagent_core.testing.sampler import ROW_PATTERNS, make_row
from pyagent_samplers_constraints.bans import (
    AllowedTokensProcessor,
    BadWordsProcessor,
    MinTokensProcessor,
    NoRepeatNgramProcessor,
    SuppressTokensProcessor,
)
from pyagent_samplers_constraints.logit_bias import LogitBiasProcessor

lp = pytest.importorskip("transformers.generation.logits_process")

VOCAB = 12


def case(seed: int) -> tuple[list[int], list[int], torch.Tensor]:
    """A prompt, the output so far (both over a small vocabulary, so n-grams repeat) and logits rows."""
    rng = random.Random(seed)
    prompt = [rng.randrange(VOCAB) for _ in range(rng.randint(1, 12))]
    output = [rng.randrange(VOCAB) for _ in range(rng.randint(0, 12))]
    row = make_row(VOCAB, seed, ROW_PATTERNS[seed % len(ROW_PATTERNS)])
    return prompt, output, row


def ours(impl, params, prompt, output, row) -> torch.Tensor:
    processor = impl({}, SamplerContext(VOCAB))
    processor.update_state(BatchUpdate(1, added=(AddedRequest(0, params, tuple(prompt), list(output)),)))
    return processor.apply(row.unsqueeze(0).clone())[0]


def theirs(warper, prompt, output, row) -> torch.Tensor:
    return warper(torch.tensor([prompt + output]), row.unsqueeze(0).clone())[0]


def assert_same_or_kept(result, expected, row, what):
    """Equal to transformers' row, or the input row where transformers masks every token."""
    if not bool(torch.isfinite(expected).any()):
        assert torch.equal(result, row), f"{what}: a ban that empties the row must leave it unchanged"
    else:
        assert torch.equal(result, expected), what


@pytest.mark.parametrize("seed", range(40))
def test_bans_match_transformers(seed):
    prompt, output, row = case(seed)
    rng = random.Random(1000 + seed)
    n = rng.randint(1, 4)
    assert_same_or_kept(ours(NoRepeatNgramProcessor, {"no_repeat_ngram_size": n}, prompt, output, row),
                        theirs(lp.NoRepeatNGramLogitsProcessor(n), prompt, output, row), row, f"ngram {n}")
    bad = [[rng.randrange(VOCAB) for _ in range(rng.randint(1, 3))] for _ in range(rng.randint(1, 4))]
    assert_same_or_kept(ours(BadWordsProcessor, {"bad_words_ids": bad}, prompt, output, row),
                        theirs(lp.NoBadWordsLogitsProcessor(bad), prompt, output, row), row, f"bad words {bad}")
    suppressed = rng.sample(range(VOCAB), rng.randint(1, VOCAB))
    assert_same_or_kept(ours(SuppressTokensProcessor, {"suppress_tokens": suppressed}, prompt, output, row),
                        theirs(lp.SuppressTokensLogitsProcessor(suppressed), prompt, output, row), row,
                        f"suppress {suppressed}")
    minimum, eos = rng.randint(0, 14), rng.sample(range(VOCAB), 2)
    params = {"min_tokens": minimum, "eos_token_ids": eos}
    for warper in (lp.MinNewTokensLengthLogitsProcessor(len(prompt), minimum, eos),
                   lp.MinLengthLogitsProcessor(len(prompt) + minimum, eos)):
        assert_same_or_kept(ours(MinTokensProcessor, params, prompt, output, row),
                            theirs(warper, prompt, output, row), row, f"min tokens {params}")
    bias = {t: rng.uniform(-100, 100) for t in rng.sample(range(VOCAB), 3)}
    sequence_bias = lp.SequenceBiasLogitsProcessor({(t,): b for t, b in bias.items()})
    torch.testing.assert_close(ours(LogitBiasProcessor, {"logit_bias": bias}, prompt, output, row),
                               theirs(sequence_bias, prompt, output, row))


def test_allowed_token_ids_keep_only_those():
    row = make_row(VOCAB, 3, "spread")
    out = ours(AllowedTokensProcessor, {"allowed_token_ids": [2, 5]}, [1], [], row)
    assert torch.isfinite(out).nonzero().flatten().tolist() == [2, 5]
    assert torch.equal(out[[2, 5]], row[[2, 5]])


def test_min_tokens_lifts_the_ban_once_reached():
    """The engine's live output list: EOS is banned for the first min_tokens steps only."""
    outputs: list[int] = []
    processor = MinTokensProcessor({}, SamplerContext(VOCAB))
    params = {"min_tokens": 2, "eos_token_ids": [0]}
    processor.update_state(BatchUpdate(1, added=(AddedRequest(0, params, (1,), outputs),)))
    banned = []
    for _ in range(4):
        banned.append(not bool(torch.isfinite(processor.apply(torch.zeros(1, VOCAB))[0, 0])))
        outputs.append(3)
    assert banned == [True, True, False, False]
