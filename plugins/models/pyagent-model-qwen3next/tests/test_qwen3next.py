"""Qwen3-Next against the model kit (transformers' model as the reference, through a checkpoint folder:
its experts are stored per expert) and from a tiny transformers checkpoint, as safetensors and as the
GGUF file llama.cpp's converter writes (regrouped q/k/v/z rows, 1 + w norms, ``-exp(A_log)``, stacked
experts)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pytest
from safetensors.torch import load_file

from pyagent_core.errors import UnsupportedModelError
from pyagent_core.testing.model import VARIANT_CHECKS, ModelConformance, transformers_checkpoint_logits
from pyagent_engine.testing.checkpoints import EngineCheckpointKit
from pyagent_model_base.checkpoint_kit import (
    finish_gguf,
    gguf_name_map,
    gguf_writer,
    stacked_experts,
)
from pyagent_model_qwen3next.model import Qwen3Next, qkvz_order
from pyagent_model_qwen3next.plugin import QWEN3NEXT

#: Two Gated DeltaNet and two attention layers; two key heads for four value heads; eight experts, two per token.
TINY = {"hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 4, "num_attention_heads": 4,
        "num_key_value_heads": 2, "head_dim": 16, "max_position_embeddings": 128, "rms_norm_eps": 1e-6,
        "layer_types": ["linear_attention", "full_attention", "linear_attention", "full_attention"],
        "linear_conv_kernel_dim": 4, "linear_key_head_dim": 16, "linear_value_head_dim": 16,
        "linear_num_key_heads": 2, "linear_num_value_heads": 4, "moe_intermediate_size": 32,
        "shared_expert_intermediate_size": 48, "num_experts": 8, "num_experts_per_tok": 2,
        "tie_word_embeddings": False, "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0,
                                                          "partial_rotary_factor": 0.25}}


class TestQwen3Next(ModelConformance):
    impl = Qwen3Next
    spec = QWEN3NEXT
    config_json: ClassVar[dict[str, Any]] = {"architectures": ["Qwen3NextForCausalLM"], "vocab_size": 96,
                                             "model_type": "qwen3_next", **TINY}
    required_keys = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
                     "max_position_embeddings")
    #: bfloat16 rounding flips top-2-of-8 choices of a random router (a flip moves logits by ~1).
    bfloat16_overrides: ClassVar[dict[str, Any]] = {"num_experts_per_tok": 8}

    def reference_logits(self, config_json, weights, ids):
        return transformers_checkpoint_logits(config_json, weights, ids)


class _Qwen3NextDenseLayers(TestQwen3Next):
    """A dense MLP on the layers ``mlp_only_layers`` names and off the sparse step (every second layer)."""

    config_json: ClassVar[dict[str, Any]] = {**TestQwen3Next.config_json, "mlp_only_layers": [0],
                                             "decoder_sparse_step": 2}


@pytest.mark.parametrize("check", VARIANT_CHECKS)
def test_the_dense_layers_variant(check: str) -> None:
    getattr(_Qwen3NextDenseLayers(), check)()


def write_qwen3next_gguf(folder: Path, path: Path) -> None:
    """The folder as llama.cpp's converter writes a Qwen3-Next (its ``Qwen3NextModel``)."""
    config = json.loads((folder / "config.json").read_text())
    layers, experts = config["num_hidden_layers"], config["num_experts"]
    writer = gguf_writer(path, "qwen3next", config)
    writer.add_context_length(config["max_position_embeddings"])
    writer.add_embedding_length(config["hidden_size"])
    writer.add_feed_forward_length(config["intermediate_size"])
    writer.add_head_count(config["num_attention_heads"])
    writer.add_head_count_kv(config["num_key_value_heads"])
    writer.add_rope_freq_base(config["rope_parameters"]["rope_theta"])
    writer.add_layer_norm_rms_eps(config["rms_norm_eps"])
    writer.add_expert_count(experts)
    writer.add_expert_used_count(config["num_experts_per_tok"])
    writer.add_key_length(config["head_dim"])
    writer.add_value_length(config["head_dim"])
    writer.add_expert_feed_forward_length(config["moe_intermediate_size"])
    writer.add_expert_shared_feed_forward_length(config["shared_expert_intermediate_size"])
    writer.add_ssm_conv_kernel(config["linear_conv_kernel_dim"])
    writer.add_ssm_state_size(config["linear_key_head_dim"])
    writer.add_ssm_group_count(config["linear_num_key_heads"])
    writer.add_ssm_time_step_rank(config["linear_num_value_heads"])
    writer.add_ssm_inner_size(config["linear_value_head_dim"] * config["linear_num_value_heads"])
    writer.add_full_attention_interval(2)
    writer.add_rope_dimension_count(int(config["head_dim"] * config["rope_parameters"]["partial_rotary_factor"]))
    names = gguf_name_map("qwen3next", layers)
    order = qkvz_order(config["linear_num_key_heads"], config["linear_key_head_dim"],
                       config["linear_num_value_heads"], config["linear_value_head_dim"])
    stored = load_file(folder / "model.safetensors")
    tensors = {}
    for name, tensor in stored.items():
        values = tensor.float().numpy()
        if ".experts." in name:
            continue
        if name.endswith(".A_log"):
            values = -np.exp(values)
        elif name.endswith(".dt_bias"):
            name = name.removesuffix(".dt_bias") + ".dt_proj.bias"
        elif "conv1d" in name:
            values = values.squeeze()
        elif name.endswith("norm.weight") and not name.endswith("linear_attn.norm.weight"):
            values = values + 1
        if "in_proj_qkvz" in name:
            layer = int(name.split(".")[2])
            grouped = values[order.numpy()]
            gate_rows = config["linear_value_head_dim"] * config["linear_num_value_heads"]
            tensors[f"blk.{layer}.attn_qkv.weight"] = grouped[:-gate_rows]
            tensors[f"blk.{layer}.attn_gate.weight"] = grouped[-gate_rows:]
            continue
        tensors[names.get_name(name, try_suffixes=(".weight", ".bias"))] = values
    for layer in range(layers):
        tensors |= stacked_experts(stored, layer, experts)
    finish_gguf(writer, tensors)


class TestQwen3NextCheckpoint(EngineCheckpointKit):
    impl = Qwen3Next
    spec = QWEN3NEXT
    model_type = "qwen3_next"
    config: ClassVar[dict[str, Any]] = TINY
    write_gguf = staticmethod(write_qwen3next_gguf)


def test_the_layout_and_the_families():
    config = TestQwen3Next().make_config()
    layout = Qwen3Next.cache_layout(config)
    conv_dim = 2 * 2 * 16 + 4 * 16
    assert layout.layers[0].shapes == ((conv_dim, 3), (4, 16, 16)) and layout.layers[1].num_kv_heads == 2
    assert Qwen3Next.mixer_families(config) == ("short_conv", "gated_delta")
    assert config.settings["partial_rotary_factor"] == 0.25


def test_the_regrouped_rows_are_a_permutation():
    order = qkvz_order(2, 3, 4, 5)
    assert sorted(order.tolist()) == list(range(2 * (2 * 3 + 2 * 2 * 5)))
    assert order[:3].tolist() == [0, 1, 2] and order[3:6].tolist() == [26, 27, 28]  # q of key heads 0 and 1


def test_attention_biases_are_refused():
    with pytest.raises(UnsupportedModelError, match="attention_bias: true"):
        Qwen3Next.config_from_hf({**TestQwen3Next.config_json, "attention_bias": True}, "qwen3next", "q/config.json")
