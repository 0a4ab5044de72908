"""The model's two precisions on real GGUFs: int8 products against exact ones (the quality gate).

Per GGUF type: the embedded Q4_1, and Q4_K_M and Q8_0 made from it with llama.cpp's ``llama-quantize
--allow-requantize`` when one is found (``$PYAGENT_LLAMA_QUANTIZE``, else ``llama-quantize`` on the
PATH; the tests of those types skip saying so otherwise; the files are built in a temporary folder,
never kept). The int8 path's perplexity over a public-domain text (``data/alice-chapters-1-2.txt``,
6,039 tokens in windows of 512; see ``data/README.md``) must be within 0.5% of the exact path's, and
greedy decoding of the test prompts must mostly agree; a decode step at int8 reads the file's tensor
bytes. The exact path keeps the dense model's bits (``test_model_forward.py``). The forward runs with
the ``paged`` attention backend (the engine's default). Run with ``-s`` to see the figures (they are
in docs/benchmarks.md).
"""

from __future__ import annotations

import math
import os
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

import gguf
import pytest
import torch

from pyagent_core.interfaces.attention import AttentionBackend, AttentionContext
from pyagent_core.interfaces.model import ModelContext
from pyagent_core.kinds import ATTENTION
from pyagent_core.registry import get_registry
from pyagent_engine.models.checkpoint import Checkpoint
from pyagent_engine.models.gguf_file import read_gguf
from pyagent_kernels.quantized import QuantizedWeight
from pyagent_model_base.decoder import DecoderLM

from .conftest import BLOCK_SIZE, CHAT_PROMPTS, build_model, model_caches, single_sequence_metadata

TEXT = Path(__file__).with_name("data") / "alice-chapters-1-2.txt"
LLAMA_QUANTIZE_ENV = "PYAGENT_LLAMA_QUANTIZE"
PRECISIONS = ("exact", "int8")
#: The int8 path's perplexity may exceed (or undercut) the exact path's by this fraction at most.
PERPLEXITY_GATE = 0.005
#: Tokens per window of the perplexity pass.
WINDOW = 512
GREEDY_TOKENS = 32


def llama_quantize() -> str | None:
    """The llama-quantize to build the other GGUF types with, or None."""
    return os.environ.get(LLAMA_QUANTIZE_ENV) or shutil.which("llama-quantize")


@pytest.fixture(scope="module", params=["q4_1", "q4_k_m", "q8_0"])
def gguf_type(request: pytest.FixtureRequest, gguf_path: Path, tmp_path_factory: pytest.TempPathFactory
              ) -> tuple[str, Path, Checkpoint]:
    """The embedded GGUF, or one requantized from it: its type, path, and checkpoint read without the
    conversion cache."""
    name: str = request.param
    if name == "q4_1":
        return name, gguf_path, read_gguf(gguf_path)
    tool = llama_quantize()
    if tool is None:
        pytest.skip(f"the {name} GGUF is built with llama.cpp's llama-quantize, which was not found: set "
                    f"{LLAMA_QUANTIZE_ENV}=/path/to/llama-quantize")
    target = tmp_path_factory.mktemp(name) / f"{gguf_path.stem}.{name}.gguf"
    subprocess.run([tool, "--allow-requantize", str(gguf_path), str(target), name.upper()], check=True,
                   capture_output=True)
    return name, target, read_gguf(target)


@pytest.fixture(scope="module")
def models(gguf_type: tuple[str, Path, Checkpoint]) -> dict[str, DecoderLM]:
    """The GGUF's model at each precision."""
    return {precision: build_model(gguf_type[2], precision=precision) for precision in PRECISIONS}


@pytest.fixture(scope="module")
def paged(checkpoint: Checkpoint) -> AttentionBackend:
    """The ``paged`` attention backend (through the registry, as the engine gets it)."""
    cfg = checkpoint.config
    registry = get_registry()
    selection = registry.select(ATTENTION, "paged", {"threads": 1})
    context = AttentionContext(num_heads=cfg.num_heads, head_size=cfg.head_dim, num_kv_heads=cfg.num_kv_heads,
                               scale=cfg.attention_scale, block_size=BLOCK_SIZE, dtype="float32")
    return registry.load(selection.backend)(selection.options, context)


def run(model: DecoderLM, attention: AttentionBackend, ids: Sequence[int], caches: list[torch.Tensor], start: int,
        logits_rows: torch.Tensor) -> torch.Tensor:
    """The logits of rows ``logits_rows`` of new tokens ``ids`` at positions ``start..`` of one sequence."""
    num_blocks = caches[0].shape[1]
    return model.forward(torch.tensor(list(ids)), torch.arange(start, start + len(ids)), caches,
                         single_sequence_metadata(start, len(ids), num_blocks), attention, logits_rows)


def perplexity(model: DecoderLM, attention: AttentionBackend, ids: list[int]) -> float:
    """exp of the mean negative log-likelihood of each WINDOW-token window's tokens after its first, the
    windows prefilled one after another as separate sequences (llama.cpp's perplexity tool scores
    chunks of its context size alike)."""
    total, count = 0.0, 0
    for start in range(0, len(ids) - 1, WINDOW):
        window = ids[start : start + WINDOW]
        caches = model_caches(model, -(-WINDOW // BLOCK_SIZE), BLOCK_SIZE)
        logits = run(model, attention, window, caches, 0, torch.arange(len(window) - 1))
        targets = torch.tensor(window[1:])
        total -= float(torch.log_softmax(logits.double(), -1)[torch.arange(len(targets)), targets].sum())
        count += len(targets)
    return math.exp(total / count)


def greedy(model: DecoderLM, attention: AttentionBackend, prompt: list[int], new: int) -> list[int]:
    """``new`` tokens decoded greedily after ``prompt`` (end-of-sequence ignored)."""
    caches = model_caches(model, -(-(len(prompt) + new) // BLOCK_SIZE), BLOCK_SIZE)
    logits = run(model, attention, prompt, caches, 0, torch.tensor([len(prompt) - 1]))
    tokens = [int(logits[0].argmax())]
    while len(tokens) < new:
        logits = run(model, attention, tokens[-1:], caches, len(prompt) + len(tokens) - 1, torch.tensor([0]))
        tokens.append(int(logits[0].argmax()))
    return tokens


def test_int8_perplexity_is_within_half_a_percent_of_exact(gguf_type: tuple[str, Path, Checkpoint],
                                                            models: dict[str, DecoderLM],
                                                            paged: AttentionBackend) -> None:
    name, _, checkpoint = gguf_type
    ids = checkpoint.tokenizer.encode(TEXT.read_text(encoding="utf-8"))
    assert len(ids) > 5000
    results = {precision: perplexity(model, paged, ids) for precision, model in models.items()}
    change = results["int8"] / results["exact"] - 1
    print(f"\n{name}: {len(ids)} tokens in windows of {WINDOW}, perplexity exact {results['exact']:.4f}, "
          f"int8 {results['int8']:.4f} ({change:+.3%})")
    assert abs(change) < PERPLEXITY_GATE


def test_greedy_decoding_mostly_agrees(gguf_type: tuple[str, Path, Checkpoint], models: dict[str, DecoderLM],
                                       paged: AttentionBackend) -> None:
    """Each test prompt decoded greedily by both precisions: the first token agrees on at least 6 of
    8 prompts (int8 rounds the logits differently, so near ties may flip, and then the texts part)."""
    name, _, checkpoint = gguf_type
    template = checkpoint.chat_template
    assert template is not None
    same, first, common = 0, 0, []
    for prompt in CHAT_PROMPTS:
        ids = checkpoint.tokenizer.encode(template.render([{"role": "user", "content": prompt}]),
                                          add_special_tokens=False)
        exact, int8 = (greedy(models[precision], paged, ids, GREEDY_TOKENS) for precision in PRECISIONS)
        same += exact == int8
        first += exact[0] == int8[0]
        common.append(next((i for i, (a, b) in enumerate(zip(exact, int8, strict=True)) if a != b), GREEDY_TOKENS))
    print(f"\n{name}: greedy {GREEDY_TOKENS} tokens, identical on {same} of {len(CHAT_PROMPTS)} prompts, first token "
          f"on {first}, tokens in common before the first difference {common}")
    assert first >= 6


def test_int8_keeps_every_matrix_in_its_blocks_and_reads_the_file_s_bytes(
        gguf_type: tuple[str, Path, Checkpoint], models: dict[str, DecoderLM]) -> None:
    """At int8 every quantized matrix stays in its blocks, even a fused one whose parts no exact layout
    holds together, and a decode step reads the file's tensor bytes (SmolLM2's matrices have multiples
    of 16 rows, so no group is padded); exact reads more."""
    name, path, _ = gguf_type
    for layer in models["int8"].layers:
        for matrix in (layer.qkv, layer.o_proj, layer.gate_up, layer.down):
            assert isinstance(matrix, QuantizedWeight)
    file_bytes = sum(int(tensor.n_bytes) for tensor in gguf.GGUFReader(path).tensors)
    read = {precision: model.decode_weight_bytes() for precision, model in models.items()}
    print(f"\n{name}: a decode step reads {read['int8'] / 1e6:.2f} MB at int8, {read['exact'] / 1e6:.2f} MB exact; "
          f"the file's tensors: {file_bytes / 1e6:.2f} MB")
    assert read["int8"] == file_bytes < read["exact"]


def test_an_unknown_precision_is_refused(checkpoint: Checkpoint) -> None:
    with pytest.raises(ValueError, match="'precision' must be in"):
        ModelContext(config=checkpoint.config, weights=checkpoint.weights, precision="int4")
