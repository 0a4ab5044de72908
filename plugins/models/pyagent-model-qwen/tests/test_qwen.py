"""Qwen2 and Qwen3 against the model kit (transformers' models as the reference) and end to end from
tiny transformers checkpoints, as safetensors and as GGUF files."""

from __future__ import annotations

from typing import Any, ClassVar

import pytest

from pyagent_core.errors import UnsupportedModelError
from pyagent_core.testing.model import ModelConformance, transformers_logits
from pyagent_engine.testing.checkpoints import CheckpointConformance
from pyagent_model_qwen.model import Qwen2, Qwen3
from pyagent_model_qwen.plugin import QWEN2, QWEN3

TINY = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
        "num_key_value_heads": 2, "max_position_embeddings": 128, "rms_norm_eps": 1e-6, "rope_theta": 1e6}
#: Qwen3 sets head_dim apart from hidden_size / heads (128 with 2048 / 16 in Qwen3-1.7B): 24, not 16.
TINY_QWEN3 = {**TINY, "head_dim": 24}


class TestQwen2(ModelConformance):
    impl = Qwen2
    spec = QWEN2
    config_json: ClassVar[dict[str, Any]] = {
        "architectures": ["Qwen2ForCausalLM"], "vocab_size": 96, "tie_word_embeddings": True, **TINY}

    def reference_logits(self, config_json, weights, ids):
        return transformers_logits({**config_json, "model_type": "qwen2"}, weights, ids)


class TestQwen3(ModelConformance):
    impl = Qwen3
    spec = QWEN3
    config_json: ClassVar[dict[str, Any]] = {
        "architectures": ["Qwen3ForCausalLM"], "vocab_size": 96, "tie_word_embeddings": False,
                   **TINY_QWEN3}

    def reference_logits(self, config_json, weights, ids):
        return transformers_logits({**config_json, "model_type": "qwen3"}, weights, ids)


class TestQwen2Checkpoint(CheckpointConformance):
    impl = Qwen2
    spec = QWEN2
    model_type = "qwen2"
    gguf_arch = "qwen2"
    config: ClassVar[dict[str, Any]] = {**TINY, "tie_word_embeddings": True}


class TestQwen3Checkpoint(CheckpointConformance):
    impl = Qwen3
    spec = QWEN3
    model_type = "qwen3"
    gguf_arch = "qwen3"
    config: ClassVar[dict[str, Any]] = {**TINY_QWEN3, "tie_word_embeddings": False}


def test_the_weights_carry_what_sets_each_apart():
    """Qwen2 reads q/k/v biases and Qwen3 per-head q/k norms of head_dim, beside Llama's weights."""
    qwen2 = TestQwen2().make_config()
    assert {"model.layers.1.self_attn.k_proj.bias"} <= set(Qwen2.weight_shapes(qwen2))
    qwen3 = TestQwen3().make_config()
    assert Qwen3.weight_shapes(qwen3)["model.layers.0.self_attn.q_norm.weight"] == (24,)
    assert Qwen3.gguf_tensor_names(qwen3)["blk.0.attn_k_norm.weight"] == "model.layers.0.self_attn.k_norm.weight"


def test_sliding_window_layers_are_refused():
    data = {**TestQwen2.config_json, "use_sliding_window": True, "sliding_window": 32}
    with pytest.raises(UnsupportedModelError, match="use_sliding_window: true; pyagent's qwen2 runs full attention"):
        Qwen2.config_from_hf(data, "qwen2", "q/config.json")
