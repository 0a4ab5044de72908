"""DeepSeek-V3 against the model kit (transformers' model as the reference, through a checkpoint folder:
its experts are stored per expert) and from a tiny transformers checkpoint, as safetensors and as the
GGUF file llama.cpp's converter writes (``kv_b_proj`` split into ``attn_k_b``/``attn_v_b``, stacked
experts, ``exp_probs_b``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, ClassVar

import gguf
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
from pyagent_model_deepseek.model import DeepseekV3
from pyagent_model_deepseek.plugin import DEEPSEEK_V3

#: One dense layer then two of eight experts (two per token, from the best of four groups of two).
TINY = {"hidden_size": 64, "intermediate_size": 96, "moe_intermediate_size": 32, "num_hidden_layers": 3,
        "num_attention_heads": 4, "num_key_value_heads": 4, "n_routed_experts": 8, "n_shared_experts": 1,
        "num_experts_per_tok": 2, "n_group": 4, "topk_group": 2, "routed_scaling_factor": 2.5,
        "first_k_dense_replace": 1, "kv_lora_rank": 32, "q_lora_rank": 48, "qk_rope_head_dim": 8,
        "qk_nope_head_dim": 16, "v_head_dim": 16, "max_position_embeddings": 128, "rms_norm_eps": 1e-6,
        "tie_word_embeddings": False}


class TestDeepseekV3(ModelConformance):
    impl = DeepseekV3
    spec = DEEPSEEK_V3
    config_json: ClassVar[dict[str, Any]] = {"architectures": ["DeepseekV3ForCausalLM"], "vocab_size": 96,
                                             "model_type": "deepseek_v3", **TINY}
    required_keys = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads")
    #: bfloat16 rounding flips top-2-of-8 choices of a random router.
    bfloat16_overrides: ClassVar[dict[str, Any]] = {"num_experts_per_tok": 8, "topk_group": 4}

    def reference_logits(self, config_json, weights, ids):
        return transformers_checkpoint_logits(config_json, weights, ids)


class _DeepseekV3FullRankQueries(TestDeepseekV3):
    """``q_proj`` without a low rank, rotate-half RoPE, no renormalisation, no groups, two shared experts."""

    config_json: ClassVar[dict[str, Any]] = {**TestDeepseekV3.config_json, "q_lora_rank": None,
                                             "rope_interleave": False, "norm_topk_prob": False, "n_group": 1,
                                             "topk_group": 1, "n_shared_experts": 2}
    bfloat16_overrides: ClassVar[dict[str, Any]] = {"num_experts_per_tok": 8}


@pytest.mark.parametrize("check", VARIANT_CHECKS)
def test_the_full_rank_queries_variant(check: str) -> None:
    getattr(_DeepseekV3FullRankQueries(), check)()


def write_deepseek_gguf(folder: Path, path: Path) -> None:
    """The folder as llama.cpp's converter writes a DeepSeek-V3 (its ``DeepseekV2Model``)."""
    config = json.loads((folder / "config.json").read_text())
    layers, heads, experts = config["num_hidden_layers"], config["num_attention_heads"], config["n_routed_experts"]
    rank, rope, nope, v_dim = (config[k] for k in ("kv_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim",
                                                   "v_head_dim"))
    writer = gguf_writer(path, "deepseek2", config)
    writer.add_context_length(config["max_position_embeddings"])
    writer.add_embedding_length(config["hidden_size"])
    writer.add_feed_forward_length(config["intermediate_size"])
    writer.add_head_count(heads)
    writer.add_head_count_kv(1)
    writer.add_rope_freq_base(config["rope_parameters"]["rope_theta"])
    writer.add_layer_norm_rms_eps(config["rms_norm_eps"])
    writer.add_expert_count(experts)
    writer.add_expert_used_count(config["num_experts_per_tok"])
    writer.add_expert_group_count(config["n_group"])
    writer.add_expert_group_used_count(config["topk_group"])
    writer.add_expert_gating_func(gguf.ExpertGatingFuncType.SIGMOID)
    writer.add_leading_dense_block_count(config["first_k_dense_replace"])
    writer.add_vocab_size(config["vocab_size"])
    writer.add_q_lora_rank(config["q_lora_rank"])
    writer.add_kv_lora_rank(rank)
    writer.add_key_length(rank + rope)
    writer.add_value_length(rank)
    writer.add_key_length_mla(nope + rope)
    writer.add_value_length_mla(v_dim)
    writer.add_expert_feed_forward_length(config["moe_intermediate_size"])
    writer.add_expert_shared_count(config["n_shared_experts"])
    writer.add_expert_weights_scale(config["routed_scaling_factor"])
    writer.add_expert_weights_norm(True)
    writer.add_rope_dimension_count(rope)
    names = gguf_name_map("deepseek2", layers)
    stored = load_file(folder / "model.safetensors")
    tensors = {}
    for name, tensor in stored.items():
        if ".experts." in name:
            continue
        layer = name.split(".")[2] if name.startswith("model.layers.") else None
        if name.endswith("kv_b_proj.weight"):
            kv_b = tensor.view(heads, nope + v_dim, rank)
            tensors[f"blk.{layer}.attn_k_b.weight"] = kv_b[:, :nope].transpose(1, 2).numpy()
            tensors[f"blk.{layer}.attn_v_b.weight"] = kv_b[:, nope:].numpy()
            continue
        name = name.replace("e_score_correction_bias", "e_score_correction.bias")
        tensors[names.get_name(name, try_suffixes=(".weight", ".bias"))] = tensor.float().numpy()
    for layer in range(config["first_k_dense_replace"], layers):
        tensors |= stacked_experts(stored, layer, experts)
    finish_gguf(writer, tensors)


class TestDeepseekV3Checkpoint(EngineCheckpointKit):
    impl = DeepseekV3
    spec = DEEPSEEK_V3
    model_type = "deepseek_v3"
    config: ClassVar[dict[str, Any]] = TINY
    write_gguf = staticmethod(write_deepseek_gguf)


def test_the_cache_is_the_latent():
    config = TestDeepseekV3().make_config()
    layout = DeepseekV3.cache_layout(config)
    assert not layout.stateful and layout.bytes_per_token(4) == 3 * (32 + 8) * 4
    assert config.num_kv_heads == 4 and config.head_dim == 8


def test_softmax_routed_files_are_refused():
    metadata = {"general.architecture": "deepseek2", "deepseek2.expert_gating_func": 1}
    with pytest.raises(UnsupportedModelError, match=r"softmax .*DeepSeek-V2"):
        DeepseekV3.config_from_gguf(metadata, (), "deepseek3", "d.gguf")
