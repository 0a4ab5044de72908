"""PyagentLogitsProcessor: a pyagent chain inside transformers' LogitsProcessorList gives the same
scores as the equivalent transformers processors, step by step, on random scores."""

from __future__ import annotations

import pytest
import torch
from transformers import (
    LogitsProcessorList,
    MinPLogitsWarper,
    RepetitionPenaltyLogitsProcessor,
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
)

from pyagent_core.errors import SelectionError
from pyagent_transformers.logits_processor import PyagentLogitsProcessor

VOCAB = 300


def run_both(ours: LogitsProcessorList, theirs: LogitsProcessorList, steps: int = 5, rows: int = 3) -> None:
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(0, VOCAB, (rows, 12), generator=gen)
    for step in range(steps):
        scores = torch.randn(rows, VOCAB, generator=gen) * 3
        got, want = ours(ids, scores.clone()), theirs(ids, scores.clone())
        assert torch.equal(got, want), f"step {step}: rows {(got != want).any(dim=1).nonzero().flatten().tolist()}"
        ids = torch.cat([ids, torch.randint(0, VOCAB, (rows, 1), generator=gen)], dim=1)


def test_default_chain_matches_transformers() -> None:
    params = {"repetition_penalty": 1.3, "top_k": 50, "top_p": 0.9, "min_p": 0.05, "temperature": 0.7}
    ours = LogitsProcessorList([PyagentLogitsProcessor("penalties,top_k,top_p,min_p,temperature", params)])
    theirs = LogitsProcessorList([
        RepetitionPenaltyLogitsProcessor(1.3), TopKLogitsWarper(50), TopPLogitsWarper(0.9),
        MinPLogitsWarper(0.05), TemperatureLogitsWarper(0.7),
    ])
    run_both(ours, theirs)


def test_per_row_params_and_a_new_generation_restart_the_state() -> None:
    rows = [{"repetition_penalty": 2.0}, {"repetition_penalty": 1.0}]
    chain = PyagentLogitsProcessor(["penalties"], rows)
    ids = torch.tensor([[1, 2, 3], [1, 2, 3]])
    scores = torch.ones(2, VOCAB)
    out = chain(ids, scores.clone())
    assert out[0, :4].tolist() == [1.0, 0.5, 0.5, 0.5] and torch.equal(out[1], scores[1])
    # a shorter input is a new generate(): token 3 is no longer in the history
    out = chain(torch.tensor([[1, 2], [1, 2]]), scores.clone())
    assert out[0, :4].tolist() == [1.0, 0.5, 0.5, 1.0]


def test_rejects_selectors_and_mismatched_params() -> None:
    with pytest.raises(SelectionError, match="token selector"):
        PyagentLogitsProcessor("top_k,greedy")
    chain = PyagentLogitsProcessor("top_k", [{"top_k": 1}])
    with pytest.raises(ValueError, match="one mapping per row"):
        chain(torch.zeros(2, 3, dtype=torch.long), torch.zeros(2, VOCAB))


@pytest.fixture(scope="module")
def tiny_llama():
    """A small random Llama (vocabulary 64): enough for generate() to run its real loop."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                         bos_token_id=None, eos_token_id=None, pad_token_id=None)
    return LlamaForCausalLM(config).eval()


@pytest.mark.parametrize("penalty", [1.5, 3.0])
def test_left_padding_is_not_penalised_inside_generate(tiny_llama, penalty: float) -> None:
    """In generate() on a left-padded batch, transformers' repetition penalty leaves the padding out
    of each row's prompt; with the attention mask the adapter does too, and every token is equal.
    The pad id is the short row's own first greedy token, so penalising padding would change it."""
    short = torch.tensor([[5, 9, 12]])
    with torch.no_grad():
        pad = int(tiny_llama(short).logits[0, -1].argmax())
    assert pad not in short.tolist()[0]
    long = [7, 3, 30, 41, 22, 8]
    ids = torch.tensor([[pad] * 3 + short.tolist()[0], long])
    mask = torch.tensor([[0, 0, 0, 1, 1, 1], [1] * 6])
    common = {"attention_mask": mask, "max_new_tokens": 8, "do_sample": False, "pad_token_id": pad}
    with torch.no_grad():
        theirs = tiny_llama.generate(ids, repetition_penalty=penalty, **common)
        chain = PyagentLogitsProcessor("penalties", {"repetition_penalty": penalty}, attention_mask=mask)
        ours = tiny_llama.generate(ids, logits_processor=LogitsProcessorList([chain]), **common)
    assert ours.tolist() == theirs.tolist()


def test_an_attention_mask_of_another_batch_is_refused() -> None:
    chain = PyagentLogitsProcessor("penalties", {"repetition_penalty": 1.2}, attention_mask=torch.ones(2, 3))
    with pytest.raises(ValueError, match="attention_mask has 2 rows but input_ids has 3"):
        chain(torch.zeros(3, 3, dtype=torch.long), torch.zeros(3, VOCAB))
