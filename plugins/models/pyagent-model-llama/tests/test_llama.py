"""The llama and mistral architectures against the model kit (transformers' models as the reference) and
end to end from tiny transformers checkpoints, as safetensors and as GGUFs with llama.cpp's q/k
permutation; Mistral's prompts are longer than its sliding window."""

from __future__ import annotations

from typing import Any, ClassVar

import attrs
import pytest
import torch

from pyagent_core.errors import UnsupportedModelError
from pyagent_core.testing.model import ModelConformance, transformers_logits
from pyagent_engine.testing.checkpoints import CheckpointConformance
from pyagent_model_llama.model import Llama, Mistral
from pyagent_model_llama.plugin import MISTRAL, SPEC

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
    impl = Llama
    spec = SPEC
    model_type = "llama"
    gguf_arch = "llama"
    permute_qk = True
    config: ClassVar[dict[str, Any]] = {**TINY, "tie_word_embeddings": True}


class TestMistral(ModelConformance):
    impl = Mistral
    spec = MISTRAL
    prompt_length = 24
    config_json: ClassVar[dict[str, Any]] = {
        "architectures": ["MistralForCausalLM"], "vocab_size": 96, "tie_word_embeddings": False, **TINY,
        "sliding_window": 5}

    def reference_logits(self, config_json, weights, ids):
        return transformers_logits({**config_json, "model_type": "mistral"}, weights, ids)

    def test_the_window_is_what_makes_it_match(self) -> None:
        """Attending to the whole prompt instead of the window moves the logits far from transformers'."""
        config = self.make_config()
        weights = self.make_weights(config)
        ids = self.prompt(config)
        model = self.make_model(weights=weights)
        context = attrs.evolve(Mistral.attention_context(config, self.block_size, "float32"), sliding_windows=())
        unwindowed = type(self.make_attention(model))({}, context)
        reference = self.reference_logits(dict(self.config_json), weights, ids)
        assert (self.prefill(model, ids, unwindowed) - reference).abs().max().item() > 0.1
        short = ids[:5]  # no longer than the window: the same logits either way
        torch.testing.assert_close(self.prefill(model, short, unwindowed), self.prefill(model, short))


class TestMistralCheckpoint(CheckpointConformance):
    """A window of 6 positions: the chat prompt and the 32 greedy tokens run far past it."""

    impl = Mistral
    spec = MISTRAL
    model_type = "mistral"
    gguf_arch = "llama"
    permute_qk = True
    config: ClassVar[dict[str, Any]] = {**TINY, "tie_word_embeddings": False, "sliding_window": 6}


def test_gguf_rope_scaling_is_refused_whether_named_or_carried_as_frequency_factors():
    metadata = {"general.architecture": "llama", "llama.embedding_length": 64, "llama.attention.head_count": 4}
    for extra, tensors, named in (({"llama.rope.scaling.type": "yarn"}, set(), "'yarn'"),
                                  ({}, {"rope_freqs.weight"}, r"'llama3 \(rope_freqs\.weight\)'")):
        with pytest.raises(UnsupportedModelError, match=f"m.gguf uses rope scaling {named}"):
            Llama.config_from_gguf(metadata | extra, tensors, "llama", "m.gguf")


def test_biases_are_refused():
    with pytest.raises(UnsupportedModelError, match="sets attention_bias: true; pyagent's llama has no biases"):
        Llama.config_from_hf({**TestLlama.config_json, "attention_bias": True}, "llama", "l/config.json")
