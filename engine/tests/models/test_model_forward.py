"""Our Llama forward (the llama model plugin, through the registry) against Hugging Face transformers
loading the same GGUF, and the flat paged batch's invariants (chunked prefill, mixed batches)."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from pyagent_core.interfaces.attention import AttentionBackend, AttentionMetadata
from pyagent_engine.models.checkpoint import Checkpoint
from pyagent_kernels.quantized import QuantizedWeight
from pyagent_model_base.decoder import DecoderLM
from pyagent_model_base.step_plan import REUSED_STEP_TOKENS

from .conftest import BLOCK_SIZE, CHAT_PROMPTS, Greedy, Prefill, build_model, model_caches, single_sequence_metadata

#: Largest absolute difference allowed between our float32 logits and transformers' (same weights,
#: same float32 arithmetic up to operation order; observed: about 6e-5 on logits of magnitude ~20).
FLOAT32_LOGITS_ATOL = 2e-4
#: bfloat16 against float32 on the first step (bfloat16 keeps 8 mantissa bits; observed: up to ~0.55).
BFLOAT16_LOGITS_ATOL = 1.0
GREEDY_TOKENS = 64


@pytest.fixture(scope="module")
def chat_ids(checkpoint: Checkpoint) -> list[list[int]]:
    """Each chat prompt rendered with the model's template and tokenized (no extra special tokens)."""
    template = checkpoint.chat_template
    assert template is not None
    return [
        checkpoint.tokenizer.encode(template.render([{"role": "user", "content": p}]), add_special_tokens=False)
        for p in CHAT_PROMPTS
    ]


@pytest.fixture(scope="module")
def model_bf16(checkpoint: Checkpoint) -> DecoderLM:
    """Our bfloat16 model of the embedded GGUF."""
    return build_model(checkpoint, "bfloat16")


def test_weights_match_transformers(checkpoint: Checkpoint, hf_model: Any) -> None:
    """Dequantized and un-permuted weights are bit-identical to what transformers loads."""
    reference = hf_model.state_dict()
    quantized = 0
    for name, weight in checkpoint.weights.items():
        if isinstance(weight, QuantizedWeight):
            quantized += 1
            weight = weight.dequantize()
        assert torch.equal(weight, reference[name]), name
    assert quantized == 1 + 7 * checkpoint.config.num_layers  # token_embd (Q8_0) and every Q4_1 matrix


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_quantized_weights_give_the_dense_bits(
    checkpoint: Checkpoint, chat_ids: list[list[int]], prefill: Prefill, dtype: torch.dtype
) -> None:
    """The kernel decoding GGUF blocks gives the logits of the dequantized model, bit for bit,
    on a prefill (the panel path) and on single-token steps (the register path)."""
    name = str(dtype).removeprefix("torch.")
    quantized = build_model(checkpoint, name)
    dense = build_model(checkpoint, name, quantized=False)
    assert isinstance(quantized.layers[0].gate_up, QuantizedWeight) and isinstance(dense.lm_head, torch.Tensor)
    for ids in chat_ids[:2]:
        assert torch.equal(prefill(quantized, ids)[0], prefill(dense, ids)[0])
        assert torch.equal(prefill(quantized, ids[:1])[0], prefill(dense, ids[:1])[0])


def test_prefill_logits_match_transformers(
    model_f32: DecoderLM, hf_model: Any, chat_ids: list[list[int]], prefill: Prefill
) -> None:
    """Logits at every prompt position agree within FLOAT32_LOGITS_ATOL for all 8 chat prompts."""
    for ids in chat_ids:
        ours, _ = prefill(model_f32, ids)
        with torch.no_grad():
            reference = hf_model(torch.tensor([ids])).logits[0].float()
        assert ours.dtype == torch.float32 and ours.shape == reference.shape
        assert (ours - reference).abs().max().item() <= FLOAT32_LOGITS_ATOL


@pytest.mark.parametrize("prompt_index", range(len(CHAT_PROMPTS)))
def test_greedy_decoding_matches_transformers(
    prompt_index: int, model_f32: DecoderLM, hf_model: Any, chat_ids: list[list[int]], greedy: Greedy
) -> None:
    """64 greedy tokens (or up to end of sequence) are the ids transformers' greedy decoding picks: after the
    prompt and each prefix of our tokens, transformers' logits are largest at our next token.

    Greedy decoding picks each token from the text before it alone, so transformers' forward over the prompt
    and our tokens (teacher forcing) checks every step generate() would take, in one call instead of 64
    sequential ones."""
    ids = chat_ids[prompt_index]
    ours, _ = greedy(model_f32, ids, GREEDY_TOKENS)
    with torch.no_grad():
        logits = hf_model(torch.tensor([ids + ours[:-1]])).logits[0, len(ids) - 1 :]
    assert logits.argmax(-1).tolist() == ours


def test_bfloat16_agrees_with_float32(
    model_f32: DecoderLM, model_bf16: DecoderLM, chat_ids: list[list[int]], greedy: Greedy
) -> None:
    """bfloat16 runs end to end and stays close to float32.

    Looser than float32 against transformers, since bfloat16 rounding can swap near-tied tokens:
    first-step logits within BFLOAT16_LOGITS_ATOL, bfloat16's first token always among float32's
    top 5, and the first 4 greedy tokens identical for at least 6 of the 8 prompts.
    """
    agreeing = 0
    for ids in chat_ids:
        full, first_full = greedy(model_f32, ids, 4)
        half, first_half = greedy(model_bf16, ids, 4)
        assert first_half.dtype == torch.float32
        assert (first_half - first_full).abs().max().item() <= BFLOAT16_LOGITS_ATOL
        assert half[0] in first_full.topk(5).indices.tolist()
        agreeing += full == half
    assert agreeing >= 6


def _metadata(tables: list[list[int]], starts: list[int], counts: list[int], block_size: int) -> AttentionMetadata:
    """Metadata for sequences with block tables ``tables`` getting ``counts`` new tokens after ``starts``."""
    slots = [
        tables[s][p // block_size] * block_size + p % block_size
        for s in range(len(tables)) for p in range(starts[s], starts[s] + counts[s])
    ]
    seq_lens = [start + count for start, count in zip(starts, counts, strict=True)]
    return AttentionMetadata(
        block_tables=torch.tensor(tables, dtype=torch.int32),
        slot_mapping=torch.tensor(slots, dtype=torch.int64),
        seq_lens=torch.tensor(seq_lens, dtype=torch.int32),
        query_start_loc=torch.tensor([0, *torch.tensor(counts).cumsum(0).tolist()], dtype=torch.int32),
        max_query_len=max(counts),
        max_seq_len=max(seq_lens),
    )


def test_chunked_prefill_and_mixed_batch_match_single_prefill(
    model_f32: DecoderLM, attention: AttentionBackend, chat_ids: list[list[int]], prefill: Prefill
) -> None:
    """Two sequences batched in scattered blocks, the first prefilled in two chunks while the second
    is prefilled in one, give the logits each gets when prefilled alone."""
    a, b = chat_ids[0], chat_ids[1]
    block_size, cut = 8, len(a) // 2
    tables = [[5, 0, 9, 2, 7, 11, 13], [3, 10, 1, 6, 4, 8, 12]]
    assert max(len(a), len(b)) <= 7 * block_size
    caches = model_caches(model_f32, 14, block_size, torch.float32)
    model_f32.forward(torch.tensor(a[:cut]), torch.arange(cut), caches,
                      _metadata(tables[:1], [0], [cut], block_size), attention, torch.tensor([cut - 1]))
    rest = len(a) - cut
    logits = model_f32.forward(
        torch.tensor(a[cut:] + b), torch.cat([torch.arange(cut, len(a)), torch.arange(len(b))]), caches,
        _metadata(tables, [cut, 0], [rest, len(b)], block_size), attention,
        torch.tensor([rest - 1, rest + len(b) - 1]),
    )
    for row, ids in enumerate((a, b)):
        alone, _ = prefill(model_f32, ids)
        torch.testing.assert_close(logits[row], alone[-1], atol=1e-4, rtol=0)


def test_kv_cache_layout(model_f32: DecoderLM) -> None:
    """The declared layout allocates one zeroed [2, blocks, block_size, kv_heads, head_dim] cache per layer."""
    cfg = model_f32.config
    caches = model_caches(model_f32, 3, 16, torch.bfloat16)
    assert len(caches) == cfg.num_layers
    assert all(c.shape == (2, 3, 16, cfg.num_kv_heads, cfg.head_dim) and c.dtype == torch.bfloat16 for c in caches)
    assert not caches[0].any()


def test_bfloat16_decode_is_batch_invariant(
    model_bf16: DecoderLM, attention: AttentionBackend, chat_ids: list[list[int]]
) -> None:
    """In bfloat16 a decode step gives each sequence bit-identical logits alone or batched."""
    a, b = chat_ids[2], chat_ids[3]
    block_size, tables = 8, [list(range(0, 7)), list(range(7, 14))]
    assert max(len(a), len(b)) < 7 * block_size
    caches = model_caches(model_bf16, 14, block_size, torch.bfloat16)
    for table, ids in zip(tables, (a, b), strict=True):
        model_bf16.forward(torch.tensor(ids), torch.arange(len(ids)), caches,
                           _metadata([table], [0], [len(ids)], block_size), attention, torch.tensor([len(ids) - 1]))
    step = torch.tensor([a[-1], b[-1]])
    batched = model_bf16.forward(step, torch.tensor([len(a), len(b)]), caches,
                                 _metadata(tables, [len(a), len(b)], [1, 1], block_size), attention, torch.arange(2))
    for row, (table, ids) in enumerate(zip(tables, (a, b), strict=True)):
        alone = model_bf16.forward(step[row : row + 1], torch.tensor([len(ids)]), caches,
                                   _metadata([table], [len(ids)], [1], block_size), attention, torch.tensor([0]))
        assert torch.equal(alone[0], batched[row])


def test_steps_on_the_reused_buffers_agree_with_steps_on_their_own(
    model_f32: DecoderLM, attention: AttentionBackend, chat_ids: list[list[int]], prefill: Prefill
) -> None:
    """A prompt longer than REUSED_STEP_TOKENS (prefilled on buffers made for the step) gives the
    logits it gets in chunks on the model's reused buffers, and a step made while another holds
    those buffers (here: their lock taken by hand) gives their bits on its own."""
    ids = [token for prompt in chat_ids for token in prompt][: REUSED_STEP_TOKENS + 20]
    assert len(ids) > REUSED_STEP_TOKENS
    whole, _ = prefill(model_f32, ids)
    num_blocks = -(-len(ids) // BLOCK_SIZE)
    caches = model_caches(model_f32, num_blocks, BLOCK_SIZE, torch.float32)
    chunks = []
    for start, stop in ((0, 40), (40, len(ids) - 1), (len(ids) - 1, len(ids))):
        step = (torch.tensor(ids[start:stop]), torch.arange(start, stop), caches,
                single_sequence_metadata(start, stop - start, num_blocks), attention, torch.arange(stop - start))
        chunks.append(model_f32.forward(*step))
    torch.testing.assert_close(torch.cat(chunks), whole, atol=1e-4, rtol=0)
    with model_f32._step_lock:
        assert torch.equal(model_f32.forward(*step), chunks[-1])


def test_inputs_and_positions_of_different_lengths_are_refused(
    model_f32: DecoderLM, attention: AttentionBackend
) -> None:
    caches = model_caches(model_f32, 1, BLOCK_SIZE, torch.float32)
    with pytest.raises(ValueError, match=r"input_ids and positions must both be \[num_tokens\]"):
        model_f32.forward(torch.tensor([1, 2]), torch.tensor([0]), caches, single_sequence_metadata(0, 2, 1),
                          attention, torch.tensor([1]))
