"""The Llama decoder: the shared layers as they are, q/k rows permuted in GGUF files."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import gguf

from pyagent_core.errors import UnsupportedModelError
from pyagent_model_base.decoder import DecoderLM


class Llama(DecoderLM):
    """``LlamaForCausalLM`` and GGUF ``llama`` files (whose converter interleaves q/k rows for RoPE)."""

    hf_architecture = "LlamaForCausalLM"
    model_type = "llama"
    gguf_arch = gguf.MODEL_ARCH.LLAMA
    gguf_permutes_qk = True

    @classmethod
    def check_hf_variant(cls, data: Mapping[str, Any], where: str) -> None:
        """The base's refusals, and biases on the projections (``attention_bias``, ``mlp_bias``)."""
        super().check_hf_variant(data, where)
        for key in ("attention_bias", "mlp_bias"):
            if data.get(key):
                raise UnsupportedModelError(f"{where} sets {key}: true; pyagent's llama has no biases")
