"""The Granite 4 hybrid decoder (``GraniteMoeHybridForCausalLM``, GGUF ``granitehybrid``).

Layers are Mamba2 mixers (:mod:`pyagent_model_base.mamba`) or grouped-query attention, as
``layer_types`` says (``mamba``/``attention``, or transformers' ``linear_attention``/
``full_attention``); attention rotates its queries and keys only with ``position_embedding_type:
rope`` (Granite 4 uses no positions: its Mamba layers order the tokens). Each layer's feed-forward is
a mixture of experts (softmax over the router's top-k logits, ``block_sparse_moe``; its gate and up
projections stacked in ``input_linear``) plus a shared SwiGLU MLP (``shared_mlp``), or the shared MLP
alone without experts. Granite's multipliers: the embedding times ``embedding_multiplier``,
attention scores scaled by ``attention_multiplier``, both residual branches by
``residual_multiplier``, the logits divided by ``logits_scaling``.

In GGUF files llama.cpp's converter permutes the attention q/k rows (Llama's interleaved RoPE),
splits the stacked gate/up projections (``ffn_gate_exps``/``ffn_up_exps``, ``ffn_gate_shexp``/
``ffn_up_shexp``), stores the Mamba tensors in its own forms and marks the attention layers by a
non-zero key/value head count; whether attention rotates is ``rope.scaling.finetuned``.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping
from typing import Any, ClassVar

import gguf
import torch

from pyagent_core.interfaces.attention import AttentionContext
from pyagent_core.interfaces.cache import CacheLayout, LayerCache, PagedKV
from pyagent_core.interfaces.model import ConfigKey, ModelConfig
from pyagent_kernels.linear import linear
from pyagent_model_base.decoder import layer_prefix
from pyagent_model_base.hybrid import (
    Block,
    FeedForward,
    HybridLM,
    Mix,
    WeightReader,
    attention_mix,
    common_keys,
    read_layer_types,
    swiglu_ffn,
)
from pyagent_model_base.layers import Rope, rms_norm
from pyagent_model_base.mamba import (
    MAMBA_CONVERTED,
    MambaShape,
    MambaWeights,
    check_time_step_limit,
    mamba_gguf_names,
    mamba_mix,
    restore_gguf_mamba,
)
from pyagent_model_base.moe import MoeWeights, Routing, moe_forward

MAMBA, ATTENTION = "linear_attention", "full_attention"


class GraniteHybrid(HybridLM):
    """``GraniteMoeHybridForCausalLM`` and GGUF ``granitehybrid`` files."""

    hf_architecture = "GraniteMoeHybridForCausalLM"
    model_type = "granitemoehybrid"
    gguf_arch = gguf.MODEL_ARCH.GRANITE_HYBRID
    config_keys: ClassVar[tuple[ConfigKey, ...]] = (
        *common_keys("vocab_size", "hidden_size", "intermediate_size", "num_layers", "num_heads", "num_kv_heads",
                     "rope_theta", "rms_norm_eps", "max_position_embeddings", "tie_word_embeddings",
                     max_position_embeddings=2048),
        ConfigKey("embedding_multiplier", "embedding_multiplier", "{arch}.embedding_scale", float, 1.0),
        ConfigKey("logits_scaling", "logits_scaling", "{arch}.logit_scale", float, 1.0, positive=True),
        ConfigKey("residual_multiplier", "residual_multiplier", "{arch}.residual_scale", float, 1.0),
        ConfigKey("attention_multiplier", "attention_multiplier", "{arch}.attention.scale", float, 1.0),
        ConfigKey("num_local_experts", "num_local_experts", "{arch}.expert_count", int, 8),
        ConfigKey("num_experts_per_tok", "num_experts_per_tok", "{arch}.expert_used_count", int, 2, positive=True),
        ConfigKey("shared_intermediate_size", "shared_intermediate_size", "{arch}.expert_shared_feed_forward_length",
                  int, 1024, positive=True),
        ConfigKey("mamba_n_heads", "mamba_n_heads", "{arch}.ssm.time_step_rank", int, 128, positive=True),
        ConfigKey("mamba_n_groups", "mamba_n_groups", "{arch}.ssm.group_count", int, 1, positive=True),
        ConfigKey("mamba_d_state", "mamba_d_state", "{arch}.ssm.state_size", int, 256, positive=True),
        ConfigKey("mamba_d_head", "mamba_d_head", "{arch}.ssm.head_dim", int, positive=True),
        ConfigKey("mamba_d_conv", "mamba_d_conv", "{arch}.ssm.conv_kernel", int, 4, positive=True),
        ConfigKey("mamba_expand", "mamba_expand", "{arch}.ssm.expand", int, 2, positive=True),
        ConfigKey("mamba_conv_bias", "mamba_conv_bias", "{arch}.ssm.conv_bias", bool, True),
        ConfigKey("mamba_proj_bias", "mamba_proj_bias", "{arch}.ssm.proj_bias", bool, False),
    )

    @classmethod
    def check_hf_variant(cls, data: Mapping[str, Any], where: str) -> None:
        """The base's refusals and a clamped time step."""
        super().check_hf_variant(data, where)
        check_time_step_limit(data.get("time_step_limit", [0.0, math.inf]), where)

    @classmethod
    def hf_values(cls, data: Mapping[str, Any], where: str) -> dict[str, Any]:
        """The base's values, ``mamba_d_head: auto`` worked out."""
        values = super().hf_values(data, where)
        if values.get("mamba_d_head", "auto") == "auto":
            inner = values.get("mamba_expand", 2) * values.get("hidden_size", 0)
            values["mamba_d_head"] = inner // values.get("mamba_n_heads", 128) or None
        return values

    @classmethod
    def hf_settings(cls, data: Mapping[str, Any], num_layers: int, where: str) -> dict[str, Any]:
        """The layer types (every layer Mamba by default) and whether attention rotates."""
        types = data.get("layer_types") or data.get("layers_block_type") or ["mamba"] * num_layers
        return {"layer_types": read_layer_types(types, num_layers, (MAMBA, ATTENTION), where),
                "rope": data.get("position_embedding_type") == "rope"}

    @classmethod
    def gguf_values(cls, metadata: Mapping[str, Any], tensor_names: Collection[str], arch: str) -> dict[str, Any]:
        """One key/value head count (the per-layer list's largest), the Mamba head size and expansion from
        ``ssm.inner_size``, the biases from the tensors present."""
        values = dict(metadata)
        counts = metadata.get(f"{arch}.attention.head_count_kv")
        if isinstance(counts, list):
            values[f"{arch}.attention.head_count_kv"] = max(counts, default=None) or None
        inner, heads = metadata.get(f"{arch}.ssm.inner_size"), metadata.get(f"{arch}.ssm.time_step_rank")
        hidden = metadata.get(f"{arch}.embedding_length")
        if isinstance(inner, int) and isinstance(heads, int) and heads and isinstance(hidden, int) and hidden:
            values[f"{arch}.ssm.head_dim"] = inner // heads
            values[f"{arch}.ssm.expand"] = inner // hidden
        values[f"{arch}.ssm.conv_bias"] = any(name.endswith("ssm_conv1d.bias") for name in tensor_names)
        values[f"{arch}.ssm.proj_bias"] = any(name.endswith("ssm_in.bias") for name in tensor_names)
        values.setdefault(f"{arch}.expert_count", 0)
        return values

    @classmethod
    def gguf_settings(cls, metadata: Mapping[str, Any], tensor_names: Collection[str], num_layers: int,
                      where: str) -> dict[str, Any]:
        """The layer types (a layer without key/value heads is a Mamba layer) and whether attention rotates."""
        arch = metadata.get("general.architecture")
        counts = metadata.get(f"{arch}.attention.head_count_kv")
        counts = counts if isinstance(counts, list) else [counts] * num_layers
        return {"layer_types": tuple(ATTENTION if count else MAMBA for count in counts),
                "rope": bool(metadata.get(f"{arch}.rope.scaling.finetuned", False))}

    @classmethod
    def hf_extra(cls, config: ModelConfig) -> dict[str, Any]:
        """The layer types, the position embedding and SiLU."""
        return {"layer_types": list(config.settings["layer_types"]), "hidden_act": "silu",
                "position_embedding_type": "rope" if config.settings["rope"] else None}

    @classmethod
    def shape(cls, config: ModelConfig) -> MambaShape:
        """The Mamba layers' sizes."""
        s = config.settings
        return MambaShape(config.hidden_size, s["mamba_n_heads"], s["mamba_d_head"], s["mamba_d_state"],
                          s["mamba_n_groups"], s["mamba_d_conv"], config.rms_norm_eps)

    @classmethod
    def weight_shapes(cls, config: ModelConfig) -> dict[str, tuple[int, ...]]:
        """The embedding, each layer's norms, mixer, experts and shared MLP, the final norm, the head."""
        hidden, dim, s = config.hidden_size, config.head_dim, config.settings
        experts, inter, shared = s["num_local_experts"], config.intermediate_size, s["shared_intermediate_size"]
        shapes = cls.outer_shapes(config)
        for i, kind in enumerate(s["layer_types"]):
            p = layer_prefix(i)
            shapes |= {p + "input_layernorm.weight": (hidden,), p + "post_attention_layernorm.weight": (hidden,),
                       p + "shared_mlp.input_linear.weight": (2 * shared, hidden),
                       p + "shared_mlp.output_linear.weight": (hidden, shared)}
            if kind == MAMBA:
                shapes |= cls.shape(config).weight_shapes(p + "mamba.", s["mamba_proj_bias"], s["mamba_conv_bias"])
            else:
                q, kv = config.num_heads * dim, config.num_kv_heads * dim
                shapes |= {p + "self_attn.q_proj.weight": (q, hidden), p + "self_attn.k_proj.weight": (kv, hidden),
                           p + "self_attn.v_proj.weight": (kv, hidden), p + "self_attn.o_proj.weight": (hidden, q)}
            if experts:
                shapes |= {p + "block_sparse_moe.router.layer.weight": (experts, hidden),
                           p + "block_sparse_moe.input_linear.weight": (experts, 2 * inter, hidden),
                           p + "block_sparse_moe.output_linear.weight": (experts, hidden, inter)}
        return shapes

    @classmethod
    def gguf_permuted_heads(cls, config: ModelConfig) -> dict[str, int]:
        """The attention layers' q and k projections: llama.cpp's converter reorders their rows per head."""
        return {name: heads for i, kind in enumerate(config.settings["layer_types"]) if kind == ATTENTION
                for name, heads in ((f"{layer_prefix(i)}self_attn.q_proj.weight", config.num_heads),
                                    (f"{layer_prefix(i)}self_attn.k_proj.weight", config.num_kv_heads))}

    @classmethod
    def gguf_tensor_names(cls, config: ModelConfig) -> dict[str, str]:
        """The mapped names; the Mamba tensors the converter transforms and the split gate/up projections
        under their GGUF names."""
        s = config.settings
        experts = s["num_local_experts"]
        converted = {f"{layer_prefix(i)}mamba.{name}" for i, kind in enumerate(s["layer_types"]) if kind == MAMBA
                     for name in MAMBA_CONVERTED}
        converted |= {layer_prefix(i) + f"shared_mlp.{n}_linear.weight" for i in range(config.num_layers)
                      for n in ("input", "output")}
        if experts:
            converted |= {layer_prefix(i) + "block_sparse_moe.input_linear.weight" for i in range(config.num_layers)}
        names = cls.mapped_gguf_names(config, skip=converted)
        shared = ("ffn_gate_shexp", "ffn_up_shexp", "ffn_down_shexp") if experts else ("ffn_gate", "ffn_up", "ffn_down")
        for i, kind in enumerate(s["layer_types"]):
            g = f"blk.{i}."
            if kind == MAMBA:
                names |= mamba_gguf_names(g, f"{layer_prefix(i)}mamba.")
            names |= {g + f"{n}.weight": g + f"{n}.weight" for n in shared[:2]}
            names[g + f"{shared[2]}.weight"] = layer_prefix(i) + "shared_mlp.output_linear.weight"
            if experts:
                names |= {g + f"{n}.weight": g + f"{n}.weight" for n in ("ffn_gate_exps", "ffn_up_exps")}
        return names

    @classmethod
    def gguf_restore(cls, config: ModelConfig, weights: dict[str, Any]) -> dict[str, Any]:
        """Undo the Mamba forms; stack the split gate/up projections back."""
        experts = config.settings["num_local_experts"]
        shared = ("ffn_gate_shexp", "ffn_up_shexp") if experts else ("ffn_gate", "ffn_up")
        for i, kind in enumerate(config.settings["layer_types"]):
            g, p = f"blk.{i}.", layer_prefix(i)
            if kind == MAMBA:
                restore_gguf_mamba(weights, g, p + "mamba.")
            weights[p + "shared_mlp.input_linear.weight"] = torch.cat([weights.pop(g + f"{n}.weight") for n in shared])
            if experts:
                weights[p + "block_sparse_moe.input_linear.weight"] = torch.cat(
                    [weights.pop(g + f"{n}.weight") for n in ("ffn_gate_exps", "ffn_up_exps")], dim=1)
        return weights

    @classmethod
    def cache_layout(cls, config: ModelConfig) -> CacheLayout:
        """Mamba layers keep their two states per sequence, attention layers paged keys and values."""
        state, paged = cls.shape(config).state(), PagedKV(config.num_kv_heads, config.head_dim)
        layers: list[LayerCache] = [state if kind == MAMBA else paged for kind in config.settings["layer_types"]]
        return CacheLayout(layers)

    @classmethod
    def mixer_families(cls, config: ModelConfig) -> tuple[str, ...]:
        """The convolution and the scan, when some layer is Mamba."""
        return ("short_conv", "ssd") if MAMBA in config.settings["layer_types"] else ()

    @classmethod
    def attention_context(cls, config: ModelConfig, block_size: int, dtype: str) -> AttentionContext:
        """Scores scaled by ``attention_multiplier``."""
        context = super().attention_context(config, block_size, dtype)
        return AttentionContext(num_heads=context.num_heads, head_size=context.head_size,
                                num_kv_heads=context.num_kv_heads, scale=config.settings["attention_multiplier"],
                                block_size=block_size, dtype=dtype)

    def embed(self, input_ids: torch.Tensor) -> torch.Tensor:
        """The embeddings times ``embedding_multiplier``."""
        return super().embed(input_ids) * self.config.settings["embedding_multiplier"]

    def logits(self, rows: torch.Tensor, threads: int) -> torch.Tensor:
        """The logits divided by ``logits_scaling``."""
        normed = rms_norm(rows, self.final_norm, self.config.rms_norm_eps)
        logits = linear(normed.contiguous(), self.lm_head, out_dtype=torch.float32, threads=threads,
                        precision="exact")
        return logits / self.config.settings["logits_scaling"]

    def build_blocks(self, reader: WeightReader) -> list[Block]:
        """Per layer its norms, its Mamba mixer or attention, and its experts beside the shared MLP."""
        cfg, s = self.config, self.config.settings
        rope = Rope.build(cfg.head_dim, cfg.rope_theta, cfg.max_position_embeddings, self.dtype) if s["rope"] else None
        routing = Routing(top_k=s["num_experts_per_tok"], scoring="softmax", normalize=True)
        blocks = []
        for i, kind in enumerate(s["layer_types"]):
            p = layer_prefix(i)
            mix: Mix
            if kind == MAMBA:
                mix = mamba_mix(MambaWeights.load(p + "mamba.", reader), self.shape(cfg))
            else:
                a = p + "self_attn."
                mix = attention_mix(reader.matrix(a + "q_proj.weight", a + "k_proj.weight", a + "v_proj.weight"),
                                    reader.matrix(a + "o_proj.weight"), cfg.num_heads, cfg.num_kv_heads, cfg.head_dim,
                                    rope=rope)
            blocks.append(Block(reader.tensor(p + "input_layernorm.weight"), mix,
                                reader.tensor(p + "post_attention_layernorm.weight"), self._ffn(reader, p, routing),
                                s["residual_multiplier"]))
        return blocks

    def _ffn(self, reader: WeightReader, prefix: str, routing: Routing) -> FeedForward:
        shared_up, shared_down = (reader.matrix(prefix + "shared_mlp.input_linear.weight"),
                                  reader.matrix(prefix + "shared_mlp.output_linear.weight"))
        if not self.config.settings["num_local_experts"]:
            return swiglu_ffn(shared_up, shared_down)
        m = prefix + "block_sparse_moe."
        stacked_up, stacked_down = reader.tensor(m + "input_linear.weight"), reader.tensor(m + "output_linear.weight")
        weights = MoeWeights(router=reader.tensor(m + "router.layer.weight"),
                             gate_up=[up.contiguous() for up in stacked_up],
                             down=[down.contiguous() for down in stacked_down],
                             shared_gate_up=shared_up, shared_down=shared_down)
        return lambda x, threads: moe_forward(x, weights, routing, threads)
