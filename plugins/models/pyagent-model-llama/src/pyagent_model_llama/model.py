"""The Llama and Mistral decoders: the shared layers as they are, q/k rows permuted in GGUF files, and
(Mistral) every layer attending within one sliding window."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs
import gguf

from pyagent_core.errors import UnsupportedModelError
from pyagent_core.interfaces.attention import AttentionContext
from pyagent_core.interfaces.model import ConfigKey, ModelConfig
from pyagent_model_base.decoder import DecoderLM


class Llama(DecoderLM):
    """``LlamaForCausalLM`` and GGUF ``llama`` files (whose converter interleaves q/k rows for RoPE).

    A ``sliding_window`` in the config (``{arch}.attention.sliding_window`` in a GGUF file, where
    llama.cpp writes Mistral's models as ``llama``) limits every layer to that many positions.
    """

    hf_architecture = "LlamaForCausalLM"
    model_type = "llama"
    gguf_arch = gguf.MODEL_ARCH.LLAMA
    gguf_permutes_qk = True
    config_keys = (ConfigKey("sliding_window", "sliding_window", "{arch}.attention.sliding_window", int, None,
                             positive=True),)

    @classmethod
    def check_hf_variant(cls, data: Mapping[str, Any], where: str) -> None:
        """The base's refusals, and biases on the projections (``attention_bias``, ``mlp_bias``)."""
        super().check_hf_variant(data, where)
        for key in ("attention_bias", "mlp_bias"):
            if data.get(key):
                raise UnsupportedModelError(f"{where} sets {key}: true; pyagent's {cls.model_type} has no biases")

    @classmethod
    def attention_context(cls, config: ModelConfig, block_size: int, dtype: str) -> AttentionContext:
        """The base's context, every layer within the config's ``sliding_window`` when it has one."""
        context = super().attention_context(config, block_size, dtype)
        window = config.settings.get("sliding_window")
        return context if window is None else attrs.evolve(context, sliding_windows=(window,) * config.num_layers)


class Mistral(Llama):
    """``MistralForCausalLM``: Llama's layers, each attending to its ``sliding_window`` latest positions
    (``null``: all of them). Its GGUF files are ``llama`` files."""

    hf_architecture = "MistralForCausalLM"
    model_type = "mistral"
