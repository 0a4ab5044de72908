"""Gemma 2 and Gemma 3 (text) against the model kit (transformers' models as the reference) and end to end
from tiny transformers checkpoints, as safetensors and as GGUF files (norms stored as 1 + w, as
llama.cpp's converter writes them). Every prompt is longer than the sliding window."""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

import attrs
import pytest

from pyagent_core.errors import ModelFormatError, UnsupportedModelError
from pyagent_core.testing.model import ModelConformance, transformers_logits
from pyagent_engine.api.llm import LLM
from pyagent_engine.core.config import EngineConfig
from pyagent_engine.requests.params import SamplingParams
from pyagent_engine.requests.request import RequestOutput
from pyagent_engine.spec.config import SpeculativeConfig
from pyagent_engine.testing.checkpoints import CheckpointConformance
from pyagent_model_gemma.model import Gemma2, Gemma3
from pyagent_model_gemma.plugin import GEMMA2, GEMMA3

#: head_dim 16 == query_pre_attn_scalar, as GGUF files assume (llama.cpp scales by head_dim ** -0.5).
TINY = {"hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4, "num_key_value_heads": 2,
        "head_dim": 16, "query_pre_attn_scalar": 16, "max_position_embeddings": 128, "rms_norm_eps": 1e-6,
        "sliding_window": 6}
GEMMA2_TINY = {**TINY, "num_hidden_layers": 3, "attn_logit_softcapping": 2.0, "final_logit_softcapping": 4.0,
               "rope_theta": 10000.0}
GEMMA3_TINY = {**TINY, "num_hidden_layers": 7, "rope_theta": 1e6, "rope_local_base_freq": 1e4}


class _GemmaKit(ModelConformance):
    prompt_length = 24
    #: Gemma's random-weight logits reach ~100 (scaled embeddings, 1 + w norms): float32 rounding grows.
    reference_atol = 5e-4

    def reference_logits(self, config_json, weights, ids):
        return transformers_logits({**config_json, "model_type": self.spec.name if self.spec is GEMMA2
                                    else "gemma3_text"}, weights, ids)

    def test_the_window_is_what_makes_it_match(self) -> None:
        """Dropping the sliding windows moves the logits far from transformers'."""
        config = self.make_config()
        weights = self.make_weights(config)
        ids = self.prompt(config)
        model = self.make_model(weights=weights)
        context = attrs.evolve(self.impl.attention_context(config, self.block_size, "float32"), sliding_windows=())
        unwindowed = type(self.make_attention(model))({}, context)
        reference = self.reference_logits(dict(self.config_json), weights, ids)
        assert (self.prefill(model, ids, unwindowed) - reference).abs().max().item() > 0.1


class TestGemma2(_GemmaKit):
    impl = Gemma2
    spec = GEMMA2
    config_json: ClassVar[dict[str, Any]] = {"architectures": ["Gemma2ForCausalLM"], "vocab_size": 96,
                                             "tie_word_embeddings": True, **GEMMA2_TINY}

    def test_the_caps_are_what_makes_it_match(self) -> None:
        """Uncapped attention scores, or uncapped final logits, leave transformers' far behind."""
        config = self.make_config()
        weights = self.make_weights(config)
        ids = self.prompt(config)
        reference = self.reference_logits(dict(self.config_json), weights, ids)
        model = self.make_model(weights=weights)
        context = attrs.evolve(Gemma2.attention_context(config, self.block_size, "float32"), logits_soft_cap=None)
        uncapped = self.prefill(model, ids, type(self.make_attention(model))({}, context))
        assert (uncapped - reference).abs().max().item() > 0.1
        assert self.prefill(model, ids).abs().max().item() <= 4.0  # the final cap bounds every logit


class TestGemma3(_GemmaKit):
    impl = Gemma3
    spec = GEMMA3
    config_json: ClassVar[dict[str, Any]] = {
        "architectures": ["Gemma3ForCausalLM"], "vocab_size": 96, "tie_word_embeddings": True, **GEMMA3_TINY,
        "rope_scaling": {"rope_type": "linear", "factor": 4.0}}

    def test_layers_alternate_five_local_to_one_global(self) -> None:
        config = self.make_config()
        assert Gemma3.windows(config) == (6, 6, 6, 6, 6, None, 6)
        context = Gemma3.attention_context(config, 4, "float32")
        assert context.scale == 16**-0.5 and context.logits_soft_cap is None


class _GemmaCheckpoint(CheckpointConformance):
    gguf_norm_offset = 1.0  # llama.cpp's converter stores norms as 1 + w
    logits_atol = 5e-4


class TestGemma2Checkpoint(_GemmaCheckpoint):
    impl = Gemma2
    spec = GEMMA2
    model_type = "gemma2"
    gguf_arch = "gemma2"
    config: ClassVar[dict[str, Any]] = {**GEMMA2_TINY, "tie_word_embeddings": True}

    # windows through the engine: the greedy tokens stay transformers' with chunked prefill, prefix-cache
    # hits and n-gram speculation (the prompt and the tokens run far past the window of 6)

    def run(self, checkpoint: Path, prompt_ids: list[int], passes: int = 1,
            **kwargs: Any) -> tuple[RequestOutput, LLM]:
        """The last of ``passes`` greedy runs of ``prompt_ids`` on one engine, and the engine."""
        llm = LLM(str(checkpoint), **kwargs)
        params = SamplingParams(max_tokens=self.greedy_tokens, temperature=0.0, ignore_eos=True)
        for _ in range(passes):
            [output] = llm.generate([list(prompt_ids)], params)
        return output, llm

    def test_prefix_cache_hits_and_chunks_keep_the_tokens(self, checkpoint_dir: Path, prompt_ids: list[int],
                                                          hf_greedy: list[int]) -> None:
        config = EngineConfig(kv_cache_gib=0.01, block_size=4, prefix_caching=True, max_num_seqs=2,
                              max_num_batched_tokens=5)
        output, _ = self.run(checkpoint_dir, prompt_ids, passes=2, config=config)
        assert list(output.output_token_ids) == hf_greedy
        assert output.num_cached_tokens >= 8  # the second pass found the first's blocks

    def test_ngram_speculation_keeps_the_tokens(self, checkpoint_dir: Path, prompt_ids: list[int],
                                                hf_greedy: list[int]) -> None:
        output, llm = self.run(checkpoint_dir, prompt_ids, config=EngineConfig(kv_cache_gib=0.01),
                               speculative=SpeculativeConfig(proposer="ngram", num_draft_tokens=4,
                                                             options={"min_n": 1}))
        assert list(output.output_token_ids) == hf_greedy
        assert llm.engine.speculative is not None and llm.engine.speculative.stats.num_draft_tokens > 0


class TestGemma3Checkpoint(_GemmaCheckpoint):
    impl = Gemma3
    spec = GEMMA3
    model_type = "gemma3_text"
    gguf_arch = "gemma3"
    config: ClassVar[dict[str, Any]] = {**GEMMA3_TINY, "tie_word_embeddings": True}


def test_bad_configs_are_named():
    data = {**TestGemma2.config_json, "layer_types": ["sliding_attention"]}
    with pytest.raises(ModelFormatError, match=r"g/config\.json: layer_types must list 3 entries"):
        Gemma2.config_from_hf(data, "gemma2", "g/config.json")
    data = {**TestGemma3.config_json, "rope_scaling": {"rope_type": "yarn", "factor": 8.0}}
    with pytest.raises(UnsupportedModelError, match="rope scaling 'yarn'; pyagent's gemma3 implements linear"):
        Gemma3.config_from_hf(data, "gemma3", "g/config.json")
    data = {**TestGemma2.config_json, "hidden_activation": "relu"}
    with pytest.raises(UnsupportedModelError, match="hidden_activation 'relu'"):
        Gemma2.config_from_hf(data, "gemma2", "g/config.json")
