"""The Qwen2 and Qwen3 decoders: Llama's layers with q/k/v biases (Qwen2) or per-head q/k norms (Qwen3)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import gguf

from pyagent_core.errors import UnsupportedModelError
from pyagent_model_base.decoder import DecoderLM
from pyagent_model_base.layout import DecoderLayout


class _Qwen(DecoderLM):
    """What both Qwen generations refuse: sliding-window layers (``use_sliding_window: true``)."""

    @classmethod
    def check_hf_variant(cls, data: Mapping[str, Any], where: str) -> None:
        """The base's refusals, and sliding-window attention, which pyagent's Qwen layers lack."""
        super().check_hf_variant(data, where)
        if data.get("use_sliding_window"):
            raise UnsupportedModelError(f"{where} sets use_sliding_window: true; pyagent's {cls.model_type} runs "
                                        "full attention only")


class Qwen2(_Qwen):
    """``Qwen2ForCausalLM`` and GGUF ``qwen2`` files: biases on the q, k and v projections."""

    hf_architecture = "Qwen2ForCausalLM"
    model_type = "qwen2"
    gguf_arch = gguf.MODEL_ARCH.QWEN2
    layout = DecoderLayout(qkv_bias=True)


class Qwen3(_Qwen):
    """``Qwen3ForCausalLM`` and GGUF ``qwen3`` files: an RMSNorm over each query and key head before RoPE."""

    hf_architecture = "Qwen3ForCausalLM"
    model_type = "qwen3"
    gguf_arch = gguf.MODEL_ARCH.QWEN3
    layout = DecoderLayout(qk_norm=True)

    @classmethod
    def check_hf_variant(cls, data: Mapping[str, Any], where: str) -> None:
        """The Qwen refusals, and biases on the projections (``attention_bias``)."""
        super().check_hf_variant(data, where)
        if data.get("attention_bias"):
            raise UnsupportedModelError(f"{where} sets attention_bias: true; pyagent's qwen3 has no biases")
