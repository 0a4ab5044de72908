"""LFM2 against the model kit (transformers' LFM2 as the reference) and from a tiny transformers
checkpoint, as safetensors and as the GGUF file llama.cpp's converter writes (per-layer key/value
head counts, the feed-forward's effective width, squeezed kernels)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, ClassVar

import pytest
from safetensors.torch import load_file

from pyagent_core.errors import ModelFormatError
from pyagent_core.testing.model import VARIANT_CHECKS, ModelConformance, transformers_logits
from pyagent_engine.testing.checkpoints import EngineCheckpointKit
from pyagent_model_base.checkpoint_kit import finish_gguf, gguf_name_map, gguf_writer
from pyagent_model_lfm2.model import Lfm2, feed_forward_width
from pyagent_model_lfm2.plugin import LFM2

#: The feed-forward: int(2 * 128 / 3) = 85, rounded up to a multiple of 32: 96.
TINY = {"hidden_size": 64, "intermediate_size": 128, "block_multiple_of": 32, "num_hidden_layers": 4,
        "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 128, "norm_eps": 1e-5,
        "conv_L_cache": 3, "layer_types": ["conv", "conv", "full_attention", "conv"], "tie_word_embeddings": True}


class TestLfm2(ModelConformance):
    impl = Lfm2
    spec = LFM2
    config_json: ClassVar[dict[str, Any]] = {"architectures": ["Lfm2ForCausalLM"], "vocab_size": 96, **TINY}
    required_keys = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
                     "max_position_embeddings")

    def reference_logits(self, config_json, weights, ids):
        return transformers_logits({**config_json, "model_type": "lfm2"}, weights, ids)


class _Lfm2ConvBias(TestLfm2):
    """Biases on the convolution layers' projections and kernel."""

    config_json: ClassVar[dict[str, Any]] = {**TestLfm2.config_json, "conv_bias": True, "tie_word_embeddings": False}


@pytest.mark.parametrize("check", VARIANT_CHECKS)
def test_the_conv_bias_variant(check: str) -> None:
    getattr(_Lfm2ConvBias(), check)()


def write_lfm2_gguf(folder: Path, path: Path) -> None:
    """The folder as llama.cpp's converter writes an LFM2 (its ``LFM2Model``)."""
    config = json.loads((folder / "config.json").read_text())
    writer = gguf_writer(path, "lfm2", config)
    writer.add_context_length(config["max_position_embeddings"])
    writer.add_embedding_length(config["hidden_size"])
    writer.add_feed_forward_length(feed_forward_width(config))
    writer.add_head_count(config["num_attention_heads"])
    writer.add_head_count_kv([config["num_key_value_heads"] if kind != "conv" else 0
                              for kind in config["layer_types"]])
    writer.add_rope_freq_base(config["rope_parameters"]["rope_theta"])
    writer.add_layer_norm_rms_eps(config["norm_eps"])
    writer.add_vocab_size(config["vocab_size"])
    writer.add_shortconv_l_cache(config["conv_L_cache"])
    names = gguf_name_map("lfm2", config["num_hidden_layers"])
    tensors = {}
    for name, tensor in load_file(folder / "model.safetensors").items():
        values = tensor.float().numpy()
        if "conv.conv" in name:
            values = values.squeeze(1)
        tensors[names.get_name(name, try_suffixes=(".weight", ".bias"))] = values
    finish_gguf(writer, tensors)


class TestLfm2Checkpoint(EngineCheckpointKit):
    impl = Lfm2
    spec = LFM2
    model_type = "lfm2"
    config: ClassVar[dict[str, Any]] = TINY
    write_gguf = staticmethod(write_lfm2_gguf)


def test_the_layout_follows_the_layer_types():
    config = TestLfm2().make_config()
    assert config.intermediate_size == 96 and not config.settings["block_auto_adjust_ff_dim"]
    layout = Lfm2.cache_layout(config)
    assert [type(c).__name__ for c in layout.layers] == ["RecurrentState", "RecurrentState", "PagedKV",
                                                         "RecurrentState"]
    assert layout.bytes_per_sequence() == 3 * 64 * 2 * 4 and layout.bytes_per_token(4) == 2 * 2 * 16 * 4
    assert Lfm2.hf_config(config)["layer_types"] == TINY["layer_types"]


def test_layer_types_from_attention_indices_and_bad_ones():
    data = {**TestLfm2.config_json, "full_attn_idxs": [1]}
    del data["layer_types"]
    assert Lfm2.config_from_hf(data, "lfm2", "l/config.json").settings["layer_types"] == (
        "conv", "full_attention", "conv", "conv")
    with pytest.raises(ModelFormatError, match=r"l/config\.json: layer_types must list 4 entries"):
        Lfm2.config_from_hf({**TestLfm2.config_json, "layer_types": ["conv"]}, "lfm2", "l/config.json")
