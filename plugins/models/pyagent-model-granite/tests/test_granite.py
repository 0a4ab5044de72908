"""Granite 4 hybrid against the model kit (transformers' model as the reference) and from a tiny
transformers checkpoint, as safetensors and as the GGUF file llama.cpp's converter writes (q/k rows
permuted, gate/up projections split, Mamba tensors in its forms, per-layer key/value head counts)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pytest
from safetensors.torch import load_file

from pyagent_core.testing.model import VARIANT_CHECKS, ModelConformance, transformers_checkpoint_logits
from pyagent_engine.testing.checkpoints import EngineCheckpointKit
from pyagent_model_base.checkpoint_kit import (
    finish_gguf,
    gguf_name_map,
    gguf_writer,
    mamba_gguf_tensor,
)
from pyagent_model_base.lora.gguf_adapter import rope_rows
from pyagent_model_granite.model import GraniteHybrid
from pyagent_model_granite.plugin import GRANITE_HYBRID

#: Three Mamba layers and one attention layer (no positions, as Granite 4), four experts, two per token.
TINY = {"hidden_size": 64, "intermediate_size": 32, "shared_intermediate_size": 48, "num_hidden_layers": 4,
        "num_attention_heads": 4, "num_key_value_heads": 2, "num_local_experts": 4, "num_experts_per_tok": 2,
        "layer_types": ["mamba", "attention", "mamba", "mamba"], "mamba_n_heads": 8, "mamba_d_head": 16,
        "mamba_d_state": 16, "mamba_n_groups": 2, "mamba_d_conv": 4, "mamba_chunk_size": 8,
        "embedding_multiplier": 2.0, "attention_multiplier": 0.2, "residual_multiplier": 0.5, "logits_scaling": 2.0,
        "max_position_embeddings": 1 << 20, "rms_norm_eps": 1e-6, "position_embedding_type": None,
        "tie_word_embeddings": False}


class TestGraniteHybrid(ModelConformance):
    impl = GraniteHybrid
    spec = GRANITE_HYBRID
    config_json: ClassVar[dict[str, Any]] = {"architectures": ["GraniteMoeHybridForCausalLM"], "vocab_size": 96,
                                             "model_type": "granitemoehybrid", **TINY}
    required_keys = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads")
    #: bfloat16 rounding flips top-2-of-4 choices of a random router.
    bfloat16_overrides: ClassVar[dict[str, Any]] = {"num_experts_per_tok": 4}

    def reference_logits(self, config_json, weights, ids):
        return transformers_checkpoint_logits(config_json, weights, ids)


class _GraniteHybridRope(TestGraniteHybrid):
    """Bamba-style: rotary positions on the attention layers, no experts (the shared MLP alone), tied head."""

    config_json: ClassVar[dict[str, Any]] = {**TestGraniteHybrid.config_json, "position_embedding_type": "rope",
                                             "max_position_embeddings": 128, "num_local_experts": 0,
                                             "tie_word_embeddings": True, "mamba_proj_bias": True}


@pytest.mark.parametrize("check", VARIANT_CHECKS)
def test_the_rope_variant(check: str) -> None:
    getattr(_GraniteHybridRope(), check)()


def write_granite_gguf(folder: Path, path: Path) -> None:
    """The folder as llama.cpp's converter writes a Granite 4 hybrid (its ``GraniteHybridModel``)."""
    config = json.loads((folder / "config.json").read_text())
    layers, hidden = config["num_hidden_layers"], config["hidden_size"]
    attention = [i for i, kind in enumerate(config["layer_types"]) if kind in ("attention", "full_attention")]
    experts = config["num_local_experts"]
    writer = gguf_writer(path, "granitehybrid", config)
    writer.add_embedding_length(hidden)
    writer.add_feed_forward_length(config["intermediate_size"])
    writer.add_head_count(config["num_attention_heads"])
    writer.add_rope_freq_base(config.get("rope_parameters", {}).get("rope_theta", 10000.0))
    writer.add_layer_norm_rms_eps(config["rms_norm_eps"])
    writer.add_expert_count(experts)
    writer.add_expert_used_count(config["num_experts_per_tok"])
    writer.add_attention_scale(config["attention_multiplier"])
    writer.add_embedding_scale(config["embedding_multiplier"])
    writer.add_residual_scale(config["residual_multiplier"])
    writer.add_logit_scale(config["logits_scaling"])
    writer.add_expert_shared_feed_forward_length(config["shared_intermediate_size"])
    writer.add_ssm_conv_kernel(config["mamba_d_conv"])
    writer.add_ssm_state_size(config["mamba_d_state"])
    writer.add_ssm_group_count(config["mamba_n_groups"])
    writer.add_ssm_inner_size(config["mamba_expand"] * hidden)
    writer.add_ssm_time_step_rank(config["mamba_n_heads"])
    writer.add_head_count_kv([config["num_key_value_heads"] if i in attention else 0 for i in range(layers)])
    writer.add_rope_scaling_finetuned(False)
    writer.add_context_length(1 << 20)
    names = gguf_name_map("granitehybrid", layers)
    tensors = {}
    for name, tensor in load_file(folder / "model.safetensors").items():
        values = tensor.float().numpy()
        layer = int(name.split(".")[2]) if name.startswith("model.layers.") else None
        if name.endswith("input_linear.weight"):
            gate, up = np.split(values, 2, axis=-2)
            if "block_sparse_moe" in name:
                tensors |= {f"blk.{layer}.ffn_gate_exps.weight": gate, f"blk.{layer}.ffn_up_exps.weight": up}
            else:
                short = ("ffn_gate_shexp", "ffn_up_shexp") if experts else ("ffn_gate", "ffn_up")
                tensors |= {f"blk.{layer}.{short[0]}.weight": gate, f"blk.{layer}.{short[1]}.weight": up}
            continue
        if name.endswith("shared_mlp.output_linear.weight") and not experts:
            tensors[f"blk.{layer}.ffn_down.weight"] = values
            continue
        name, values = mamba_gguf_tensor(name, values, config["mamba_n_groups"], "mamba.norm.weight")
        if name.endswith("q_proj.weight"):
            values = rope_rows(values, config["num_attention_heads"], to_gguf=True)
        elif name.endswith("k_proj.weight"):
            values = rope_rows(values, config["num_key_value_heads"], to_gguf=True)
        tensors[names.get_name(name, try_suffixes=(".weight", ".bias"))] = values
    finish_gguf(writer, tensors)


class TestGraniteHybridCheckpoint(EngineCheckpointKit):
    impl = GraniteHybrid
    spec = GRANITE_HYBRID
    model_type = "granitemoehybrid"
    config: ClassVar[dict[str, Any]] = TINY
    write_gguf = staticmethod(write_granite_gguf)


def test_the_layout_and_the_multipliers():
    config = TestGraniteHybrid().make_config()
    assert config.settings["layer_types"] == ("linear_attention", "full_attention", "linear_attention",
                                              "linear_attention")
    assert not config.settings["rope"] and config.settings["mamba_d_head"] == 16
    assert GraniteHybrid.attention_context(config, 4, "float32").scale == 0.2
    layout = GraniteHybrid.cache_layout(config)
    assert [type(c).__name__ for c in layout.layers] == ["RecurrentState", "PagedKV", "RecurrentState",
                                                         "RecurrentState"]
