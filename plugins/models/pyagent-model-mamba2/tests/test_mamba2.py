"""Mamba2 against the model kit (transformers' Mamba2 as the reference) and from a tiny transformers
checkpoint, as safetensors and as the GGUF file llama.cpp's converter writes (``ssm_a = -exp(A_log)``,
squeezed kernels, ``[groups, inner / groups]`` norms)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, ClassVar

import pytest
import torch
from safetensors.torch import load_file

from pyagent_core.errors import ModelFormatError, UnsupportedModelError
from pyagent_core.interfaces.mixer import MixerContext
from pyagent_core.testing.mixer import ReferenceMixer
from pyagent_core.testing.model import ModelConformance, transformers_logits
from pyagent_engine.testing.checkpoints import EngineCheckpointKit
from pyagent_model_base.checkpoint_kit import (
    GreedyHost,
    finish_gguf,
    gguf_name_map,
    gguf_writer,
    mamba_gguf_tensor,
)
from pyagent_model_mamba2.model import Mamba2
from pyagent_model_mamba2.plugin import MAMBA2

TINY = {"hidden_size": 64, "num_hidden_layers": 3, "num_heads": 8, "head_dim": 16, "expand": 2, "state_size": 16,
        "n_groups": 2, "conv_kernel": 4, "chunk_size": 8, "layer_norm_epsilon": 1e-5, "tie_word_embeddings": False}


class TestMamba2(ModelConformance):
    impl = Mamba2
    spec = MAMBA2
    config_json: ClassVar[dict[str, Any]] = {"architectures": ["Mamba2ForCausalLM"], "vocab_size": 96, **TINY}
    required_keys = ("vocab_size", "hidden_size", "num_hidden_layers")

    def reference_logits(self, config_json, weights, ids):
        return transformers_logits({**config_json, "model_type": "mamba2"}, weights, ids)


def write_mamba2_gguf(folder: Path, path: Path, arch: str = "mamba2") -> None:
    """The folder as llama.cpp's converter writes a Mamba2 (its ``Mamba2Model``)."""
    import json

    config = json.loads((folder / "config.json").read_text())
    hidden, layers = config["hidden_size"], config["num_hidden_layers"]
    inner = config["expand"] * hidden
    writer = gguf_writer(path, arch, config)
    writer.add_context_length(2**20)
    writer.add_embedding_length(hidden)
    writer.add_feed_forward_length(0)
    writer.add_head_count(0)
    writer.add_ssm_conv_kernel(config["conv_kernel"])
    writer.add_ssm_inner_size(inner)
    writer.add_ssm_state_size(config["state_size"])
    writer.add_ssm_time_step_rank(inner // config["head_dim"])
    writer.add_ssm_group_count(config["n_groups"])
    writer.add_layer_norm_rms_eps(config["layer_norm_epsilon"])
    names = gguf_name_map(arch, layers)
    tensors = {}
    for name, tensor in load_file(folder / "model.safetensors").items():
        values = tensor.float().numpy()
        name, values = mamba_gguf_tensor(name, values, config["n_groups"], "mixer.norm.weight")
        tensors[names.get_name(name, try_suffixes=(".weight", ".bias"))] = values
    finish_gguf(writer, tensors)


class TestMamba2Checkpoint(EngineCheckpointKit):
    impl = Mamba2
    spec = MAMBA2
    model_type = "mamba2"
    config: ClassVar[dict[str, Any]] = TINY
    write_gguf = staticmethod(write_mamba2_gguf)

    def test_a_dropped_state_parts_from_transformers(self, checkpoint_dir: Path, prompt_ids: list[int],
                                                     hf_greedy: list[int]) -> None:
        """The greedy check can fail: with a mixer that drops every sequence's state between steps, the
        chunked prefill and the decode steps lose their context and the tokens part from transformers'."""
        host = GreedyHost(self.load_folder(checkpoint_dir), 1, len(prompt_ids) + self.greedy_tokens,
                          mixer=ForgetfulMixer({}, MixerContext(dtype="float32", block_size=4)))
        assert host.generate([prompt_ids], self.greedy_tokens, self.chunk)[0][0] != hf_greedy
        assert len(set(hf_greedy)) > 4, f"transformers' continuation is too uniform to tell: {hf_greedy}"


def test_the_layout_is_a_state_per_layer_and_no_attention():
    config = TestMamba2().make_config()
    layout = Mamba2.cache_layout(config)
    assert layout.stateful and not layout.paged and len(layout.layers) == 3
    conv_dim = 128 + 2 * 2 * 16
    assert layout.layers[0].shapes == ((conv_dim, 3), (8, 16, 16))
    assert layout.bytes_per_sequence() == 3 * 4 * (conv_dim * 3 + 8 * 16 * 16)
    assert Mamba2.mixer_families(config) == ("short_conv", "ssd")


def test_a_forward_without_a_mixer_is_refused():
    kit = TestMamba2()
    model = kit.make_model()
    with pytest.raises(ValueError, match=r"needs a mixer backend with the families \('short_conv', 'ssd'\)"):
        model.forward(torch.tensor([1]), torch.tensor([0]), kit.make_caches(model.config, 1), None,
                      kit.make_attention(model), torch.tensor([0]))


def test_bad_configs_are_named():
    data = {**TestMamba2.config_json, "expand": 3}
    with pytest.raises(ModelFormatError, match=r"expand \* hidden_size \(192\) must equal num_heads \* head_dim"):
        Mamba2.config_from_hf(data, "mamba2", "m/config.json")
    with pytest.raises(UnsupportedModelError, match="clamps the time step"):
        Mamba2.config_from_hf({**TestMamba2.config_json, "time_step_limit": [0.0, 0.1]}, "mamba2", "m/config.json")


class ForgetfulMixer(ReferenceMixer):
    """Broken: every call starts its sequences from the zero state (chunked prefill loses its context)."""

    def short_conv(self, x, weight, bias, state, metadata, layer, activation=None):
        state[metadata.state_slots] = 0
        return super().short_conv(x, weight, bias, state, metadata, layer, activation)

    def ssd(self, x, dt, A, B, C, D, dt_bias, state, metadata, layer, dt_limit=(0.0, math.inf)):
        state[metadata.state_slots] = 0
        return super().ssd(x, dt, A, B, C, D, dt_bias, state, metadata, layer, dt_limit)



def test_a_hybrid_model_asked_for_int8_multiplies_exactly_and_says_so():
    """The hybrid families have no int8 products: the context the model keeps (which the engine reports
    as ``loaded.precision``) says exact."""
    from pyagent_core.interfaces.model import ModelContext

    kit = TestMamba2()
    config = kit.make_config()
    model = Mamba2({}, ModelContext(config=config, weights=kit.make_weights(config), precision="int8"))
    assert model.context.precision == "exact"
