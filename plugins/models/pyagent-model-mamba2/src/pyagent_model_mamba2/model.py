"""The Mamba2 decoder (``Mamba2ForCausalLM``, GGUF ``mamba2``): every layer an RMSNorm and a Mamba2 mixer.

No attention and no feed-forward: a layer is ``h += mixer(rmsnorm(h))``
(:mod:`pyagent_model_base.mamba`), each keeping a convolution window and an SSM state per sequence.
GGUF files carry no head size nor expansion: they follow from ``ssm.inner_size`` and
``ssm.time_step_rank`` (the head count), and the biases from the tensors present.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping
from typing import Any, ClassVar

import gguf

from pyagent_core.errors import ModelFormatError
from pyagent_core.interfaces.cache import CacheLayout
from pyagent_core.interfaces.model import ConfigKey, ModelConfig
from pyagent_model_base.hybrid import Block, HybridLM, WeightReader, common_keys
from pyagent_model_base.mamba import (
    MAMBA_CONVERTED,
    MambaShape,
    MambaWeights,
    check_time_step_limit,
    mamba_gguf_names,
    mamba_mix,
    restore_gguf_mamba,
)

#: GGUF files of Mamba2 say nothing of the context; llama.cpp's converter writes 2 ** 20.
UNBOUNDED_CONTEXT = 1 << 20


def mixer_prefix(layer: int) -> str:
    """The Hugging Face name prefix of layer ``layer``'s mixer."""
    return f"backbone.layers.{layer}.mixer."


class Mamba2(HybridLM):
    """``Mamba2ForCausalLM`` and GGUF ``mamba2`` files."""

    hf_architecture = "Mamba2ForCausalLM"
    model_type = "mamba2"
    gguf_arch = gguf.MODEL_ARCH.MAMBA2
    embedding_name = "backbone.embeddings.weight"
    final_norm_name = "backbone.norm_f.weight"
    config_keys: ClassVar[tuple[ConfigKey, ...]] = (
        *common_keys("vocab_size", "hidden_size", "num_layers"),
        ConfigKey("num_heads", "num_heads", "{arch}.ssm.time_step_rank", int, 128, positive=True),
        ConfigKey("head_dim", "head_dim", "{arch}.ssm.head_dim", int, 64, positive=True),
        ConfigKey("state_size", "state_size", "{arch}.ssm.state_size", int, 128, positive=True),
        ConfigKey("n_groups", "n_groups", "{arch}.ssm.group_count", int, 8, positive=True),
        ConfigKey("expand", "expand", "{arch}.ssm.expand", int, 2, positive=True),
        ConfigKey("conv_kernel", "conv_kernel", "{arch}.ssm.conv_kernel", int, 4, positive=True),
        ConfigKey("use_conv_bias", "use_conv_bias", "{arch}.ssm.conv_bias", bool, True),
        ConfigKey("use_bias", "use_bias", "{arch}.ssm.proj_bias", bool, False),
        ConfigKey("rms_norm_eps", "layer_norm_epsilon", "{arch}.attention.layer_norm_rms_epsilon", float, 1e-5),
        ConfigKey("max_position_embeddings", "max_position_embeddings", "{arch}.context_length", int,
                  UNBOUNDED_CONTEXT, positive=True),
        *common_keys("tie_word_embeddings"),
    )

    @classmethod
    def check_hf_variant(cls, data: Mapping[str, Any], where: str) -> None:
        """The base's refusals and a clamped time step."""
        super().check_hf_variant(data, where)
        check_time_step_limit(data.get("time_step_limit", [0.0, math.inf]), where)

    @classmethod
    def gguf_values(cls, metadata: Mapping[str, Any], tensor_names: Collection[str], arch: str) -> dict[str, Any]:
        """The head size and expansion from ``ssm.inner_size``, the biases from the tensors present."""
        values = dict(metadata)
        inner, heads = metadata.get(f"{arch}.ssm.inner_size"), metadata.get(f"{arch}.ssm.time_step_rank")
        hidden = metadata.get(f"{arch}.embedding_length")
        if isinstance(inner, int) and isinstance(heads, int) and heads and isinstance(hidden, int) and hidden:
            values[f"{arch}.ssm.head_dim"] = inner // heads
            values[f"{arch}.ssm.expand"] = inner // hidden
        values[f"{arch}.ssm.conv_bias"] = "blk.0.ssm_conv1d.bias" in tensor_names
        values[f"{arch}.ssm.proj_bias"] = "blk.0.ssm_in.bias" in tensor_names
        return values

    @classmethod
    def derive(cls, values: dict[str, Any]) -> dict[str, Any]:
        """The scanned width is ``expand * hidden_size`` and must be ``num_heads * head_dim``."""
        inner = values["expand"] * values["hidden_size"]
        if inner != values["num_heads"] * values["head_dim"]:
            raise ModelFormatError(f"mamba2 config: expand * hidden_size ({inner}) must equal num_heads * head_dim "
                                   f"({values['num_heads']} * {values['head_dim']})")
        return {**values, "intermediate_size": inner, "num_kv_heads": values["num_heads"], "rope_theta": 10000.0}

    @classmethod
    def shape(cls, config: ModelConfig) -> MambaShape:
        """Every layer's mixer sizes."""
        s = config.settings
        return MambaShape(config.hidden_size, config.num_heads, config.head_dim, s["state_size"], s["n_groups"],
                          s["conv_kernel"], config.rms_norm_eps)

    @classmethod
    def hf_extra(cls, config: ModelConfig) -> dict[str, Any]:
        """SiLU, the only activation it runs."""
        return {"hidden_act": "silu"}

    @classmethod
    def weight_shapes(cls, config: ModelConfig) -> dict[str, tuple[int, ...]]:
        """The embedding, each layer's norm and mixer, the final norm and (untied) the head."""
        hidden, shape = config.hidden_size, cls.shape(config)
        shapes = cls.outer_shapes(config)
        for i in range(config.num_layers):
            shapes[f"backbone.layers.{i}.norm.weight"] = (hidden,)
            shapes |= shape.weight_shapes(mixer_prefix(i), config.settings["use_bias"],
                                          config.settings["use_conv_bias"])
        return shapes

    @classmethod
    def gguf_tensor_names(cls, config: ModelConfig) -> dict[str, str]:
        """The mapped names, with the mixers' converted tensors under their GGUF names."""
        converted = {mixer_prefix(i) + name for i in range(config.num_layers) for name in MAMBA_CONVERTED}
        names = cls.mapped_gguf_names(config, skip=converted)
        for i in range(config.num_layers):
            names |= mamba_gguf_names(f"blk.{i}.", mixer_prefix(i))
        return names

    @classmethod
    def gguf_restore(cls, config: ModelConfig, weights: dict[str, Any]) -> dict[str, Any]:
        """Undo llama.cpp's forms of every mixer's tensors."""
        for i in range(config.num_layers):
            restore_gguf_mamba(weights, f"blk.{i}.", mixer_prefix(i))
        return weights

    @classmethod
    def cache_layout(cls, config: ModelConfig) -> CacheLayout:
        """Every layer keeps a convolution window and an SSM state per sequence."""
        return CacheLayout([cls.shape(config).state()] * config.num_layers)

    @classmethod
    def mixer_families(cls, config: ModelConfig) -> tuple[str, ...]:
        """The convolution and the scan."""
        return ("short_conv", "ssd")

    def build_blocks(self, reader: WeightReader) -> list[Block]:
        """A norm and a mixer per layer."""
        shape = self.shape(self.config)
        return [Block(reader.tensor(f"backbone.layers.{i}.norm.weight"),
                      mamba_mix(MambaWeights.load(mixer_prefix(i), reader), shape))
                for i in range(self.config.num_layers)]
