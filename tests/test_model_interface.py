"""The model interface's pure-Python parts: reading hyper-parameters from either file format and the
errors for missing or mistyped keys, the config's own checks, and the default attention context."""

from __future__ import annotations

import re
from typing import Any

import pytest

from pyagent_core.errors import ModelFormatError
from pyagent_core.interfaces.model import COMMON_CONFIG_KEYS, CausalLM, ConfigKey, ModelConfig, check_weights, read_keys

HF = {"vocab_size": 100, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
      "num_attention_heads": 4, "max_position_embeddings": 256}


def config(**changes: Any) -> ModelConfig:
    values: dict[str, Any] = dict(architecture="x", vocab_size=100, hidden_size=64, intermediate_size=128,
                                  num_layers=2, num_heads=4, num_kv_heads=2, head_dim=16, rope_theta=1e4,
                                  rms_norm_eps=1e-6, max_position_embeddings=256, tie_word_embeddings=True,
                                  bos_token_id=None, eos_token_ids=(1,), name="tiny")
    return ModelConfig(**(values | changes))


def test_common_keys_read_a_config_json_with_defaults_and_leave_derived_fields_out():
    found = read_keys(HF, COMMON_CONFIG_KEYS, "c/config.json")
    assert found == {"vocab_size": 100, "hidden_size": 64, "intermediate_size": 128, "num_layers": 2, "num_heads": 4,
                     "rope_theta": 10000.0, "rms_norm_eps": 1e-6, "max_position_embeddings": 256,
                     "tie_word_embeddings": False}


def test_common_keys_read_gguf_metadata_under_the_files_architecture():
    metadata = {"qwen2.vocab_size": 100, "qwen2.embedding_length": 64, "qwen2.feed_forward_length": 128,
                "qwen2.block_count": 2, "qwen2.attention.head_count": 4, "qwen2.attention.head_count_kv": 2,
                "qwen2.context_length": 256, "qwen2.attention.layer_norm_rms_epsilon": 1e-5}
    found = read_keys(metadata, COMMON_CONFIG_KEYS, "m.gguf", gguf_arch="qwen2")
    assert found["num_kv_heads"] == 2 and found["rms_norm_eps"] == 1e-5 and "head_dim" not in found


@pytest.mark.parametrize("key", ["hidden_size", "num_hidden_layers", "max_position_embeddings"])
def test_a_missing_required_key_names_the_file_and_the_key(key):
    data = {k: v for k, v in HF.items() if k != key}
    with pytest.raises(ModelFormatError, match=re.escape(f"c/config.json lacks the required key '{key}'")):
        read_keys(data, COMMON_CONFIG_KEYS, "c/config.json")
    with pytest.raises(ModelFormatError, match=re.escape("m.gguf lacks the required key 'llama.block_count'")):
        read_keys({}, [k for k in COMMON_CONFIG_KEYS if k.field == "num_layers"], "m.gguf", gguf_arch="llama")


def test_a_mistyped_value_names_the_key_and_the_value():
    message = 'c/config.json: hidden_size must be a positive integer, got "64"'
    with pytest.raises(ModelFormatError, match=re.escape(message)):
        read_keys(HF | {"hidden_size": "64"}, COMMON_CONFIG_KEYS, "c/config.json")
    with pytest.raises(ModelFormatError, match=re.escape("c/config.json: qk_norm must be true or false, got 1")):
        read_keys({"qk_norm": 1}, [ConfigKey("qk_norm", "qk_norm", None, bool, False)], "c/config.json")


def test_config_checks_its_heads_and_special_tokens():
    with pytest.raises(ModelFormatError, match="num_heads \\(4\\) must be a multiple of num_kv_heads \\(3\\)"):
        config(num_kv_heads=3)
    with pytest.raises(ModelFormatError, match="special token id 100 is outside the vocabulary"):
        config(eos_token_ids=(100,))
    assert dict(config(settings={"qkv_bias": True}).settings) == {"qkv_bias": True}


def test_check_weights_names_missing_and_misshapen_weights():
    class Shaped:
        def __init__(self, *shape: int) -> None:
            self.shape = shape

    shapes = {"a.weight": (2, 3), "b.weight": (4,)}
    with pytest.raises(ModelFormatError, match=re.escape("lacks 1 weights: b.weight")):
        check_weights(config(), {"a.weight": Shaped(2, 3)}, shapes)
    with pytest.raises(ModelFormatError, match=re.escape("weight b.weight has shape [5], the config implies [4]")):
        check_weights(config(), {"a.weight": Shaped(2, 3), "b.weight": Shaped(5)}, shapes)


def test_default_attention_context_is_the_models_heads_and_scale():
    context = CausalLM.attention_context(config(), block_size=16, dtype="float32")
    assert (context.num_heads, context.num_kv_heads, context.head_size) == (4, 2, 16)
    assert context.scale == 0.25 and context.block_size == 16
