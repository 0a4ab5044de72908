"""Phi-3 against the model kit (transformers' Phi3ForCausalLM as the reference) and end to end from a
tiny transformers checkpoint, as safetensors and as a GGUF."""

from __future__ import annotations

from typing import Any, ClassVar

import pytest

from pyagent_core.errors import UnsupportedModelError
from pyagent_core.testing.model import ModelConformance, transformers_logits
from pyagent_engine.testing.checkpoints import CheckpointConformance
from pyagent_model_phi3.model import Phi3
from pyagent_model_phi3.plugin import SPEC

TINY = {"hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 2, "num_attention_heads": 4,
        "num_key_value_heads": 2, "max_position_embeddings": 128, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
        "sliding_window": None}


class TestPhi3(ModelConformance):
    impl = Phi3
    spec = SPEC
    config_json: ClassVar[dict[str, Any]] = {
        "architectures": ["Phi3ForCausalLM"], "vocab_size": 96, "tie_word_embeddings": False, **TINY}

    def reference_logits(self, config_json, weights, ids):
        return transformers_logits({**config_json, "model_type": "phi3"}, weights, ids)


class TestPhi3Checkpoint(CheckpointConformance):
    impl = Phi3
    spec = SPEC
    model_type = "phi3"
    gguf_arch = "phi3"
    config: ClassVar[dict[str, Any]] = {**TINY, "tie_word_embeddings": False}


def test_fused_projections_are_one_weight_each():
    config = TestPhi3().make_config()
    shapes = Phi3.weight_shapes(config)
    assert shapes["model.layers.0.self_attn.qkv_proj.weight"] == ((4 + 2 * 2) * 16, 64)
    assert shapes["model.layers.0.mlp.gate_up_proj.weight"] == (2 * 96, 64)
    assert Phi3.gguf_tensor_names(config)["blk.1.ffn_up.weight"] == "model.layers.1.mlp.gate_up_proj.weight"


def test_the_context_is_capped_at_the_sliding_window():
    config = Phi3.config_from_hf({**TestPhi3.config_json, "sliding_window": 48}, "phi3", "p/config.json")
    assert config.max_position_embeddings == 48 and config.settings["sliding_window"] == 48
    assert Phi3.config_from_hf(Phi3.hf_config(config), "phi3", "p/config.json") == config


def test_longrope_is_refused():
    data = {**TestPhi3.config_json, "rope_scaling": {"type": "longrope", "short_factor": [1.0], "long_factor": [1.0]}}
    with pytest.raises(UnsupportedModelError, match="rope scaling 'longrope'"):
        Phi3.config_from_hf(data, "phi3", "p/config.json")
