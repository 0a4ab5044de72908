"""The LFM2 decoder (``Lfm2ForCausalLM``, GGUF ``lfm2``): short-convolution layers among attention layers.

A layer normalizes its input (``operator_norm``) and mixes it one of two ways, as ``layer_types``
says; then RMSNorm (``ffn_norm``) and a SwiGLU feed-forward (``w1`` gate, ``w3`` up, ``w2`` down).

- ``conv``: ``in_proj`` gives ``B``, ``C`` and ``x``; the causal depthwise convolution (the
  ``short_conv`` family, width ``conv_L_cache``, no activation) runs over ``B * x``, keeping its
  ``L - 1`` latest inputs per sequence; ``C`` gates the result before ``out_proj``.
- ``full_attention``: grouped-query attention with an RMSNorm over each query and key head before
  rotate-half RoPE.

The final norm is ``model.embedding_norm``. The feed-forward's width is what transformers computes
(``2/3`` of ``intermediate_size``, times ``block_ffn_dim_multiplier``, rounded up to
``block_multiple_of`` when ``block_auto_adjust_ff_dim``): the config keeps that width and writes it
back with the adjustment off, as GGUF files store it. A GGUF file names the layer types through its
per-layer key/value head counts (0 for a convolution layer) and stores each kernel squeezed.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any, ClassVar

import gguf
import torch

from pyagent_core.errors import ModelFormatError
from pyagent_core.interfaces.cache import CacheLayout, LayerCache, PagedKV, RecurrentState
from pyagent_core.interfaces.model import ConfigKey, ModelConfig
from pyagent_model_base.decoder import layer_prefix
from pyagent_model_base.hybrid import (
    Block,
    HybridLM,
    Mix,
    Step,
    WeightReader,
    attention_mix,
    common_keys,
    read_layer_types,
    swiglu_ffn,
)
from pyagent_model_base.layers import Rope, Weight, dense

CONV, ATTENTION = "conv", "full_attention"


def feed_forward_width(data: Mapping[str, Any]) -> int:
    """The feed-forward width transformers' ``Lfm2MLP`` computes from ``config.json``'s values."""
    width = int(data.get("block_ff_dim", data.get("intermediate_size", 12288)))
    if data.get("block_auto_adjust_ff_dim", True):
        width = int(2 * width / 3)
        multiplier = data.get("block_ffn_dim_multiplier", 1.0)
        if multiplier is not None:
            width = int(multiplier * width)
        multiple = int(data.get("block_multiple_of", 256))
        width = multiple * ((width + multiple - 1) // multiple)
    return width


def short_conv_mix(in_proj: Weight, conv: torch.Tensor, conv_bias: torch.Tensor | None, out_proj: Weight,
                   in_bias: torch.Tensor | None, out_bias: torch.Tensor | None) -> Mix:
    """A convolution layer's mix: ``out_proj(C * conv(B * x))`` (module docstring)."""

    def mix(hidden: torch.Tensor, step: Step, layer: int) -> torch.Tensor:
        assert step.mixer is not None
        projected = dense(hidden, in_proj, step.threads)
        if in_bias is not None:
            projected = projected + in_bias
        B, C, x = projected.chunk(3, dim=-1)
        (state,) = step.caches[layer]
        convolved = step.mixer.short_conv((B * x).contiguous(), conv, conv_bias, state, step.metadata, layer)
        out = dense(C * convolved, out_proj, step.threads)
        return out if out_bias is None else out + out_bias

    return mix


class Lfm2(HybridLM):
    """``Lfm2ForCausalLM`` and GGUF ``lfm2`` files."""

    hf_architecture = "Lfm2ForCausalLM"
    model_type = "lfm2"
    gguf_arch = gguf.MODEL_ARCH.LFM2
    final_norm_name = "model.embedding_norm.weight"
    config_keys: ClassVar[tuple[ConfigKey, ...]] = (
        *common_keys("vocab_size", "hidden_size", "intermediate_size", "num_layers", "num_heads", "num_kv_heads",
                     "rope_theta", "max_position_embeddings", "tie_word_embeddings", rope_theta=1e6,
                     tie_word_embeddings=True),
        ConfigKey("rms_norm_eps", "norm_eps", "{arch}.attention.layer_norm_rms_epsilon", float, 1e-5),
        ConfigKey("conv_L_cache", "conv_L_cache", "{arch}.shortconv.l_cache", int, 3, positive=True),
        ConfigKey("conv_bias", "conv_bias", "{arch}.shortconv.bias", bool, False),
        ConfigKey("block_auto_adjust_ff_dim", "block_auto_adjust_ff_dim", None, bool, False),
    )

    @classmethod
    def hf_values(cls, data: Mapping[str, Any], where: str) -> dict[str, Any]:
        """The base's values, the feed-forward's effective width (adjustment done), the tie flag under its
        current name."""
        values = {**super().hf_values(data, where), "intermediate_size": feed_forward_width(data),
                  "block_auto_adjust_ff_dim": False}
        if "tie_embedding" in data:
            values.setdefault("tie_word_embeddings", data["tie_embedding"])
        return values

    @classmethod
    def hf_settings(cls, data: Mapping[str, Any], num_layers: int, where: str) -> dict[str, Any]:
        """The layer types: ``layer_types``, else ``full_attn_idxs`` (every layer attention by default)."""
        types = data.get("layer_types")
        if types is None:
            attention = data.get("full_attn_idxs")
            attention = range(num_layers) if attention is None else attention
            types = [ATTENTION if i in attention else CONV for i in range(num_layers)]
        return {"layer_types": read_layer_types(types, num_layers, (CONV, ATTENTION), where)}

    @classmethod
    def gguf_values(cls, metadata: Mapping[str, Any], tensor_names: Collection[str], arch: str) -> dict[str, Any]:
        """The per-layer key/value head counts read as one count (their largest); the convolution
        bias from the tensors present."""
        values = dict(metadata)
        counts = metadata.get(f"{arch}.attention.head_count_kv")
        if isinstance(counts, list):
            values[f"{arch}.attention.head_count_kv"] = max(counts, default=None) or None
        values[f"{arch}.shortconv.bias"] = any(name.endswith("shortconv.in_proj.bias") for name in tensor_names)
        return values

    @classmethod
    def gguf_settings(cls, metadata: Mapping[str, Any], tensor_names: Collection[str], num_layers: int,
                      where: str) -> dict[str, Any]:
        """The layer types: a layer without key/value heads is a convolution layer."""
        arch = metadata.get("general.architecture")
        counts = metadata.get(f"{arch}.attention.head_count_kv")
        if not isinstance(counts, list) or len(counts) != num_layers:
            raise ModelFormatError(f"{where}: {arch}.attention.head_count_kv must list the key/value heads of each "
                                   f"of the {num_layers} layers (0 for a convolution layer), got {counts!r}")
        return {"layer_types": tuple(ATTENTION if count else CONV for count in counts)}

    @classmethod
    def hf_extra(cls, config: ModelConfig) -> dict[str, Any]:
        """The layer types."""
        return {"layer_types": list(config.settings["layer_types"])}

    @classmethod
    def weight_shapes(cls, config: ModelConfig) -> dict[str, tuple[int, ...]]:
        """The embedding, each layer's norms, mixer (convolution or attention) and feed-forward, the final norm."""
        hidden, inter, dim = config.hidden_size, config.intermediate_size, config.head_dim
        kernel, bias = config.settings["conv_L_cache"], config.settings["conv_bias"]
        shapes = cls.outer_shapes(config)
        for i, kind in enumerate(config.settings["layer_types"]):
            p = layer_prefix(i)
            shapes |= {p + "operator_norm.weight": (hidden,), p + "ffn_norm.weight": (hidden,),
                       p + "feed_forward.w1.weight": (inter, hidden), p + "feed_forward.w3.weight": (inter, hidden),
                       p + "feed_forward.w2.weight": (hidden, inter)}
            if kind == CONV:
                shapes |= {p + "conv.in_proj.weight": (3 * hidden, hidden), p + "conv.conv.weight": (hidden, 1, kernel),
                           p + "conv.out_proj.weight": (hidden, hidden)}
                if bias:
                    shapes |= {p + "conv.in_proj.bias": (3 * hidden,), p + "conv.conv.bias": (hidden,),
                               p + "conv.out_proj.bias": (hidden,)}
            else:
                q, kv = config.num_heads * dim, config.num_kv_heads * dim
                shapes |= {p + "self_attn.q_proj.weight": (q, hidden), p + "self_attn.k_proj.weight": (kv, hidden),
                           p + "self_attn.v_proj.weight": (kv, hidden), p + "self_attn.out_proj.weight": (hidden, q),
                           p + "self_attn.q_layernorm.weight": (dim,), p + "self_attn.k_layernorm.weight": (dim,)}
        return shapes

    @classmethod
    def gguf_tensor_names(cls, config: ModelConfig) -> dict[str, str]:
        """The mapped names, the squeezed kernels under their GGUF names."""
        kernels = {i: layer_prefix(i) + "conv.conv.weight"
                   for i, kind in enumerate(config.settings["layer_types"]) if kind == CONV}
        names = cls.mapped_gguf_names(config, skip=set(kernels.values()))
        return names | {f"blk.{i}.shortconv.conv.weight": f"blk.{i}.shortconv.conv.weight" for i in kernels}

    @classmethod
    def gguf_restore(cls, config: ModelConfig, weights: dict[str, Any]) -> dict[str, Any]:
        """Unsqueeze the convolution kernels (llama.cpp stores ``[hidden, L]``)."""
        for i, kind in enumerate(config.settings["layer_types"]):
            if kind == CONV:
                weights[layer_prefix(i) + "conv.conv.weight"] = weights.pop(f"blk.{i}.shortconv.conv.weight")[:, None]
        return weights

    @classmethod
    def cache_layout(cls, config: ModelConfig) -> CacheLayout:
        """A convolution window per sequence on convolution layers, paged keys and values on the others."""
        window = RecurrentState("short_conv", ("conv",), ((config.hidden_size, config.settings["conv_L_cache"] - 1),))
        paged = PagedKV(config.num_kv_heads, config.head_dim)
        layers: list[LayerCache] = [window if kind == CONV else paged for kind in config.settings["layer_types"]]
        return CacheLayout(layers)

    @classmethod
    def mixer_families(cls, config: ModelConfig) -> tuple[str, ...]:
        """The short convolution, when some layer is one."""
        return ("short_conv",) if CONV in config.settings["layer_types"] else ()

    def build_blocks(self, reader: WeightReader) -> list[Block]:
        """Per layer its norms, its convolution or attention, and its feed-forward."""
        cfg = self.config
        rope = Rope.build(cfg.head_dim, cfg.rope_theta, cfg.max_position_embeddings, self.dtype)
        blocks = []
        for i, kind in enumerate(cfg.settings["layer_types"]):
            p = layer_prefix(i)
            if kind == CONV:
                mix = short_conv_mix(reader.matrix(p + "conv.in_proj.weight"),
                                     reader.tensor(p + "conv.conv.weight")[:, 0].contiguous(),
                                     reader.optional(p + "conv.conv.bias"), reader.matrix(p + "conv.out_proj.weight"),
                                     reader.optional(p + "conv.in_proj.bias"),
                                     reader.optional(p + "conv.out_proj.bias"))
            else:
                mix = attention_mix(reader.matrix(*(f"{p}self_attn.{n}_proj.weight" for n in "qkv")),
                                    reader.matrix(p + "self_attn.out_proj.weight"), cfg.num_heads, cfg.num_kv_heads,
                                    cfg.head_dim, q_norm=reader.tensor(p + "self_attn.q_layernorm.weight"),
                                    k_norm=reader.tensor(p + "self_attn.k_layernorm.weight"), eps=cfg.rms_norm_eps,
                                    rope=rope)
            ffn = swiglu_ffn(reader.matrix(p + "feed_forward.w1.weight", p + "feed_forward.w3.weight"),
                             reader.matrix(p + "feed_forward.w2.weight"))
            blocks.append(Block(reader.tensor(p + "operator_norm.weight"), mix, reader.tensor(p + "ffn_norm.weight"),
                                ffn))
        return blocks
