"""typical, epsilon and eta give the masked logits of transformers' own warpers on random rows."""

from __future__ import annotations

import pytest
import torch

from pyagent_core.testing.sampler import ROW_PATTERNS, make_row, run_processor
from pyagent_samplers_truncation.cutoffs import EpsilonProcessor, EtaProcessor
from pyagent_samplers_truncation.typical import TypicalProcessor

logits_process = pytest.importorskip("transformers.generation.logits_process")

VOCAB = 97
VALUES = (1e-4, 3e-3, 0.05, 0.2, 0.5, 0.9, 0.999)


PATTERNS = (*ROW_PATTERNS, "spread", "ties")


def rows(seed: int) -> torch.Tensor:
    """Rows of every pattern (ties, -inf entries, a single finite logit, large magnitudes)."""
    return torch.stack([make_row(VOCAB, seed * 100 + i, p) for i, p in enumerate(PATTERNS)])


def hf_rows(warper: object, logits: torch.Tensor) -> torch.Tensor:
    """The warper applied to each row on its own (its parameter is the same for every row)."""
    dummy_ids = torch.zeros((1, 1), dtype=torch.long)
    return torch.cat([warper(dummy_ids, row.unsqueeze(0).clone()) for row in logits])  # type: ignore[operator]


@pytest.mark.parametrize(("processor", "name", "warper"), [
    (TypicalProcessor, "typical_p", "TypicalLogitsWarper"),
    (EpsilonProcessor, "epsilon_cutoff", "EpsilonLogitsWarper"),
    (EtaProcessor, "eta_cutoff", "EtaLogitsWarper"),
])
def test_same_masked_logits_as_transformers(processor, name, warper):
    for seed in range(4):
        logits = rows(seed)
        # one batch mixing every value: each row must match the warper built with its own value
        values = [VALUES[(seed + i) % len(VALUES)] for i in range(logits.shape[0])]
        ours = run_processor(processor, logits, [{name: v} for v in values])
        for row, value in enumerate(values):
            expected = hf_rows(getattr(logits_process, warper)(value), logits[row:row + 1])[0]
            assert torch.equal(ours[row], expected), (
                f"{warper}({value}) on a {PATTERNS[row]} row"
                f": kept {torch.isfinite(ours[row]).sum()} tokens, transformers kept {torch.isfinite(expected).sum()}"
            )


def test_typical_keeps_the_most_typical_token_at_zero():
    logits = rows(9)
    out = run_processor(TypicalProcessor, logits, [{"typical_p": 0.0}] * logits.shape[0])
    log_probs = logits.log_softmax(-1)
    entropy = -(log_probs * log_probs.exp()).nansum(-1, keepdim=True)
    shifted = (-log_probs - entropy).abs()
    assert torch.equal(torch.isfinite(out), shifted == shifted.min(dim=1, keepdim=True).values)
