"""The Phi-3 decoder: Llama's layers with one fused qkv and one fused gate/up matrix."""

from __future__ import annotations

from typing import Any

import attrs
import gguf

from pyagent_core.interfaces.model import ConfigKey, ModelConfig
from pyagent_model_base.decoder import DecoderLM
from pyagent_model_base.layout import DecoderLayout


class Phi3(DecoderLM):
    """``Phi3ForCausalLM`` and GGUF ``phi3`` files.

    Phi-3 checkpoints declare a sliding window (``sliding_window``, 2047 for Phi-3-mini-4k) that
    transformers applies; until the attention backends do, the context is capped at the window, within
    which sliding and full attention agree.
    """

    hf_architecture = "Phi3ForCausalLM"
    model_type = "phi3"
    gguf_arch = gguf.MODEL_ARCH.PHI3
    layout = DecoderLayout(qkv="self_attn.qkv_proj", gate_up="mlp.gate_up_proj")
    config_keys = (ConfigKey("sliding_window", "sliding_window", "{arch}.attention.sliding_window", int, None,
                             positive=True),)

    @classmethod
    def _config(cls, values: dict[str, Any], settings: dict[str, Any], architecture: str, **rest: Any) -> ModelConfig:
        """The base's config, its context capped at the sliding window."""
        config = super()._config(values, settings, architecture, **rest)
        window = settings.get("sliding_window")
        if window is not None and window < config.max_position_embeddings:
            config = attrs.evolve(config, max_position_embeddings=window)
        return config
