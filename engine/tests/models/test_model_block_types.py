"""GGUF files whose matrices use every block type the linear kernel decodes (the K-quants, Q5_0/Q5_1
beside Q4_0/Q4_1/Q8_0) load with their matrices kept in blocks or dequantized, with the same logits;
a block type the kernel lacks is an error naming the file, the tensor, the type and the supported ones."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from gguf import GGMLQuantizationType, GGUFReader, GGUFWriter
from gguf.quants import dequantize

from pyagent_core.errors import UnsupportedModelError
from pyagent_core.interfaces.attention import AttentionContext
from pyagent_core.testing.scaffolded import import_template
from pyagent_engine.models.checkpoint import read_checkpoint, write_checkpoint
from pyagent_engine.models.gguf_file import read_gguf, supported_block_types
from pyagent_engine.models.loader import load_model
from pyagent_kernels.quantized import FORMATS, QuantizedWeight

from .conftest import BLOCK_SIZE, model_caches, single_sequence_metadata

HIDDEN, HEADS, KV_HEADS, FFN = 256, 4, 2, 512
TOKENS = [chr(ord("a") + i) for i in range(26)] + ["ab"]
Q = GGMLQuantizationType
#: Each layer's tensor types: layer 0 fuses q/k/v into Q8_0 blocks (a Q4_K_M file's mix) and gate/up
#: into Q5_1 blocks; layer 1's q/k/v and gate/up share no layout, so they are fused dequantized.
LAYERS = [
    {"attn_q": Q.Q5_0, "attn_k": Q.Q5_0, "attn_v": Q.Q8_0, "attn_output": Q.Q4_K, "ffn_gate": Q.Q5_K,
     "ffn_up": Q.Q5_1, "ffn_down": Q.Q6_K},
    {"attn_q": Q.Q4_0, "attn_k": Q.Q4_K, "attn_v": Q.Q4_1, "attn_output": Q.Q5_1, "ffn_gate": Q.Q4_0,
     "ffn_up": Q.Q4_1, "ffn_down": Q.Q4_K},
]
SHAPES = {"attn_q": (HIDDEN, HIDDEN), "attn_k": (KV_HEADS * 64, HIDDEN), "attn_v": (KV_HEADS * 64, HIDDEN),
          "attn_output": (HIDDEN, HIDDEN), "ffn_gate": (FFN, HIDDEN), "ffn_up": (FFN, HIDDEN),
          "ffn_down": (HIDDEN, FFN)}
#: Byte offset of each block's float16 fields, and a magnitude for them that keeps activations tame
#: (a K-quant's sub-block scales multiply them by up to 63, Q6_K's by up to 127).
HALVES = {Q.Q4_0: ((0,), 0.02), Q.Q4_1: ((0, 2), 0.01), Q.Q5_0: ((0,), 0.01), Q.Q5_1: ((0, 2), 0.005),
          Q.Q8_0: ((0,), 0.001), Q.Q4_K: ((0, 2), 5e-4), Q.Q5_K: ((0, 2), 2e-4), Q.Q6_K: ((208,), 5e-5)}


def random_blocks(kind: GGMLQuantizationType, rows: int, inner: int, rng: np.random.Generator) -> np.ndarray:
    """Random GGUF rows of ``kind`` with float16 fields of either sign near the type's magnitude."""
    name = kind.name.lower()
    spec = FORMATS[name] if name in FORMATS else None
    weights, size = (spec.gguf_weights, spec.gguf_bytes) if spec else (256, 110)  # Q3_K, which the kernel lacks
    blocks = rng.integers(0, 256, size=(rows, inner // weights, size), dtype=np.uint8)
    offsets, magnitude = HALVES.get(kind, ((108,), 1e-3))
    for offset in offsets:
        halves = rng.uniform(-magnitude, magnitude, (rows, inner // weights)).astype(np.float16)
        blocks[..., offset : offset + 2] = halves.view(np.uint8).reshape(rows, -1, 2)
    return blocks.reshape(rows, -1)


def write_gguf(path: Path, layers: list[dict[str, GGMLQuantizationType]]) -> Path:
    """A small Llama GGUF (hidden 256, heads of 64) whose matrices have the types of ``layers``."""
    rng = np.random.default_rng(0)
    writer = GGUFWriter(path, arch="llama")
    writer.add_block_count(len(layers))
    writer.add_context_length(64)
    writer.add_embedding_length(HIDDEN)
    writer.add_feed_forward_length(FFN)
    writer.add_head_count(HEADS)
    writer.add_head_count_kv(KV_HEADS)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_tokenizer_model("gpt2")
    writer.add_token_list(TOKENS)
    writer.add_token_merges(["a b"])
    writer.add_tensor("token_embd.weight", random_blocks(Q.Q8_0, len(TOKENS), HIDDEN, rng), raw_dtype=Q.Q8_0)
    writer.add_tensor("output_norm.weight", np.ones(HIDDEN, dtype=np.float32))
    for index, types in enumerate(layers):
        for norm in ("attn_norm", "ffn_norm"):
            writer.add_tensor(f"blk.{index}.{norm}.weight", np.ones(HIDDEN, dtype=np.float32))
        for name, kind in types.items():
            writer.add_tensor(f"blk.{index}.{name}.weight", random_blocks(kind, *SHAPES[name], rng), raw_dtype=kind)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


@pytest.fixture(scope="module")
def mixed_gguf(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_gguf(tmp_path_factory.mktemp("blocks") / "mixed.gguf", LAYERS)


def prompt_logits(model: object, ids: list[int]) -> torch.Tensor:
    """Logits of every position of ``ids`` through the scaffold's reference attention."""
    config = model.config  # type: ignore[attr-defined]
    context = AttentionContext(num_heads=config.num_heads, head_size=config.head_dim, num_kv_heads=config.num_kv_heads,
                               scale=config.attention_scale, block_size=BLOCK_SIZE, dtype="float32")
    attention = import_template("attention").impl.KitReference({}, context)
    blocks = -(-len(ids) // BLOCK_SIZE)
    caches = model_caches(model, blocks, BLOCK_SIZE, torch.float32)
    return model.forward(torch.tensor(ids), torch.arange(len(ids)), caches,  # type: ignore[attr-defined]
                         single_sequence_metadata(0, len(ids), blocks), attention, torch.arange(len(ids)))


def test_every_block_type_loads_kept_in_blocks_or_dequantized(mixed_gguf: Path) -> None:
    """At the exact precision, kept in blocks (fused in a shared layout where there is one) and
    dequantized, the model gives the same logits; every matrix holds the gguf package's values. At int8
    a fused matrix of mixed formats stays in blocks too (the int8 kernel takes one format per row group)."""
    kept = load_model(mixed_gguf, "float32", quantized=True, use_cache=False, precision="exact").model
    dense = load_model(mixed_gguf, "float32", quantized=False, use_cache=False, precision="exact").model
    int8 = load_model(mixed_gguf, "float32", quantized=True, use_cache=False, precision="int8").model
    assert all(isinstance(getattr(int8.layers[1], name), QuantizedWeight) for name in ("qkv", "gate_up", "down"))
    first, second = kept.layers
    formats = {name: getattr(first, name).format for name in ("qkv", "o_proj", "gate_up", "down")}
    assert formats == {"qkv": "q8_0", "o_proj": "q4_k", "gate_up": "q5_1", "down": "q6_k"}
    assert isinstance(second.qkv, torch.Tensor) and isinstance(second.gate_up, torch.Tensor)
    assert isinstance(second.down, QuantizedWeight) and isinstance(kept.embed_tokens, QuantizedWeight)
    ids = [3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5]
    logits = prompt_logits(kept, ids)
    assert logits.shape == (len(ids), len(TOKENS)) and logits.isfinite().all() and logits.std() > 0
    assert torch.equal(logits, prompt_logits(dense, ids))
    checkpoint = read_gguf(mixed_gguf)
    down = checkpoint.weights["model.layers.0.mlp.down_proj.weight"]
    assert isinstance(down, QuantizedWeight)
    stored = next(t for t in GGUFReader(mixed_gguf).tensors if t.name == "blk.0.ffn_down.weight")
    assert torch.equal(down.dequantize(), torch.from_numpy(dequantize(stored.data, Q.Q6_K).reshape(HIDDEN, FFN)))


def test_a_conversion_cache_folder_keeps_every_format(mixed_gguf: Path, tmp_path: Path) -> None:
    """The packed rows of every format round-trip through a checkpoint folder (the conversion cache's)."""
    checkpoint = read_gguf(mixed_gguf)
    write_checkpoint(checkpoint, tmp_path, keep_quantized=True)
    back = read_checkpoint(tmp_path).weights
    formats = set()
    for name, weight in checkpoint.weights.items():
        if isinstance(weight, QuantizedWeight):
            formats.add(weight.format)
            again = back[name]
            assert isinstance(again, QuantizedWeight) and again.format == weight.format
            assert torch.equal(again.packed, weight.packed)
    assert formats == set(FORMATS)


def test_a_block_type_the_kernel_lacks_names_file_tensor_and_the_supported_ones(tmp_path: Path) -> None:
    path = write_gguf(tmp_path / "q3k.gguf", [{**LAYERS[0], "attn_k": Q.Q3_K}])
    with pytest.raises(UnsupportedModelError) as caught:
        load_model(path, use_cache=False)
    message = str(caught.value)
    assert message.startswith(f"{path}: tensor blk.0.attn_k.weight is stored as Q3_K, a block type")
    assert f"supported: {', '.join(supported_block_types())}" in message and "llama-quantize" in message


def test_supported_block_types_are_the_float_types_and_every_kernel_format() -> None:
    assert supported_block_types() == ("F32", "F16", "BF16", *(name.upper() for name in FORMATS))
