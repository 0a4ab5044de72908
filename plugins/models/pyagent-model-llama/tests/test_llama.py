"""The llama architecture against the model kit (transformers' Llama as the reference) and end to end
from a tiny transformers checkpoint, as safetensors and as a GGUF with llama.cpp's q/k permutation."""

from __future__ import annotations

from typing import Any, ClassVar

from pyagent_core.testing.model import ModelConformance, transformers_logits
from pyagent_engine.testing.checkpoints import CheckpointConformance
from pyagent_model_llama.model import Llama
from pyagent_model_llama.plugin import SPEC

TINY = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
        "num_key_value_heads": 2, "max_position_embeddings": 128, "rms_norm_eps": 1e-5, "rope_theta": 10000.0}


class TestLlama(ModelConformance):
    impl = Llama
    spec = SPEC
    config_json: ClassVar[dict[str, Any]] = {
        "architectures": ["LlamaForCausalLM"], "vocab_size": 96, "tie_word_embeddings": False, **TINY}

    def reference_logits(self, config_json, weights, ids):
        return transformers_logits({**config_json, "model_type": "llama"}, weights, ids)


class TestLlamaCheckpoint(CheckpointConformance):
    model_type = "llama"
    gguf_arch = "llama"
    permute_qk = True
    config: ClassVar[dict[str, Any]] = {**TINY, "tie_word_embeddings": True}
