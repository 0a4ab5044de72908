"""The llama architecture against the model kit (transformers' Llama as the reference) and end to end
from a tiny transformers checkpoint, as safetensors and as a GGUF with llama.cpp's q/k permutation."""

from __future__ import annotations

from typing import Any, ClassVar

import pytest

from pyagent_core.errors import UnsupportedModelError
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


def test_gguf_rope_scaling_is_refused_whether_named_or_carried_as_frequency_factors():
    metadata = {"general.architecture": "llama", "llama.embedding_length": 64, "llama.attention.head_count": 4}
    for extra, tensors, named in (({"llama.rope.scaling.type": "yarn"}, set(), "'yarn'"),
                                  ({}, {"rope_freqs.weight"}, r"'llama3 \(rope_freqs\.weight\)'")):
        with pytest.raises(UnsupportedModelError, match=f"m.gguf uses rope scaling {named}"):
            Llama.config_from_gguf(metadata | extra, tensors, "llama", "m.gguf")


def test_biases_are_refused():
    with pytest.raises(UnsupportedModelError, match="sets attention_bias: true; pyagent's llama has no biases"):
        Llama.config_from_hf({**TestLlama.config_json, "attention_bias": True}, "llama", "l/config.json")
