"""The DeepSeek-V3 decoder (``DeepseekV3ForCausalLM``, GGUF ``deepseek2``): latent attention and experts.

**Multi-head latent attention** (the ``mla`` family, every layer): the queries come through a low-rank
pair (``q_a_proj``, RMSNorm, ``q_b_proj``; or ``q_proj`` without ``q_lora_rank``), each head split
into ``qk_nope_head_dim`` unrotated and ``qk_rope_head_dim`` rotated values; ``kv_a_proj_with_mqa``
gives per token a ``kv_lora_rank`` latent (RMSNorm'd) and one rotated key shared by every head. The
cache keeps only those (:class:`~pyagent_core.interfaces.cache.LatentKV`); ``kv_b_proj`` holds each
head's key and value up-projections, which the mixer absorbs (``w_uk``, ``w_uv``). RoPE pairs
interleaved values (``rope_interleave``, DeepSeek's layout) or halves; scores scaled by
``(nope + rope) ** -0.5``. The low-rank norms use epsilon ``1e-6``, as transformers builds them.

**Feed-forward**: dense SwiGLU on the first ``first_k_dense_replace`` layers; then a mixture of
``n_routed_experts`` (sigmoid scores, chosen with ``e_score_correction_bias`` added, first among the
``topk_group`` best of ``n_group`` groups, weights renormalised when ``norm_topk_prob``, times
``routed_scaling_factor``) plus ``n_shared_experts`` shared experts as one MLP.

In GGUF files llama.cpp's converter splits ``kv_b_proj`` into ``attn_k_b`` (per head, transposed)
and ``attn_v_b``, stacks the experts, names the bias ``exp_probs_b``, and writes the key/value head
count as 1 (MLA as multi-query attention over the latent). A ``deepseek2`` file routed by softmax
(DeepSeek-V2) is refused.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any, ClassVar

import gguf
import torch

from pyagent_core.errors import ModelFormatError, UnsupportedModelError
from pyagent_core.interfaces.cache import CacheLayout, LatentKV
from pyagent_core.interfaces.model import ConfigKey, ModelConfig
from pyagent_model_base.decoder import layer_prefix
from pyagent_model_base.hybrid import (
    Block,
    FeedForward,
    HybridLM,
    Mix,
    Step,
    WeightReader,
    common_keys,
    swiglu_ffn,
)
from pyagent_model_base.layers import Rope, Weight, dense, rms_norm
from pyagent_model_base.moe import (
    MoeWeights,
    Routing,
    expert_gguf_names,
    expert_names,
    load_experts,
    moe_forward,
    unstack_experts,
)

#: The epsilon of the query and key/value low-rank norms (transformers builds them with its default).
LORA_NORM_EPS = 1e-6


def latent_attention_mix(q_a: Weight | None, q_a_norm: torch.Tensor | None, q_b: Weight, kv_a: Weight,
                         kv_a_norm: torch.Tensor, kv_b: torch.Tensor, o_proj: Weight, rope: Rope,
                         sizes: tuple[int, int, int, int, int], scale: float) -> Mix:
    """A layer's latent attention (module docstring); ``q_b`` is ``q_proj`` without ``q_a``; ``sizes``
    is ``(heads, nope, rope, v_head_dim, kv_lora_rank)``."""
    heads, nope, rotated, v_dim, rank = sizes
    per_head = kv_b.view(heads, nope + v_dim, rank)
    w_uk, w_uv = per_head[:, :nope].contiguous(), per_head[:, nope:].contiguous()

    def mix(x: torch.Tensor, step: Step, layer: int) -> torch.Tensor:
        tokens = x.shape[0]
        assert step.mixer is not None
        if q_a is not None and q_a_norm is not None:
            x_q = rms_norm(dense(x, q_a, step.threads), q_a_norm, LORA_NORM_EPS)
        else:
            x_q = x
        q = dense(x_q, q_b, step.threads).view(tokens, heads, nope + rotated)
        compressed = dense(x, kv_a, step.threads)
        latent = rms_norm(compressed[:, :rank], kv_a_norm, LORA_NORM_EPS)
        q_pe = rope.apply(q[..., nope:], step.positions)
        k_pe = rope.apply(compressed[:, None, rank:], step.positions)[:, 0]
        out = step.mixer.mla(q[..., :nope].contiguous(), q_pe.contiguous(), latent.contiguous(), k_pe.contiguous(),
                             w_uk, w_uv, step.caches[layer], step.metadata, layer, scale)
        return dense(out.reshape(tokens, heads * v_dim), o_proj, step.threads)

    return mix


class DeepseekV3(HybridLM):
    """``DeepseekV3ForCausalLM`` and GGUF ``deepseek2`` files (DeepSeek-V3's sigmoid routing)."""

    hf_architecture = "DeepseekV3ForCausalLM"
    model_type = "deepseek_v3"
    gguf_arch = gguf.MODEL_ARCH.DEEPSEEK2
    config_keys: ClassVar[tuple[ConfigKey, ...]] = (
        *common_keys("vocab_size", "hidden_size", "intermediate_size", "num_layers", "num_heads", "rope_theta",
                     "rms_norm_eps", "max_position_embeddings", "tie_word_embeddings", max_position_embeddings=4096),
        ConfigKey("q_lora_rank", "q_lora_rank", "{arch}.attention.q_lora_rank", int, None, positive=True),
        ConfigKey("kv_lora_rank", "kv_lora_rank", "{arch}.attention.kv_lora_rank", int, 512, positive=True),
        ConfigKey("qk_rope_head_dim", "qk_rope_head_dim", "{arch}.rope.dimension_count", int, 64, positive=True),
        ConfigKey("qk_nope_head_dim", "qk_nope_head_dim", "{arch}.attention.nope_length", int, 128, positive=True),
        ConfigKey("v_head_dim", "v_head_dim", "{arch}.attention.value_length_mla", int, 128, positive=True),
        ConfigKey("rope_interleave", "rope_interleave", None, bool, True),
        ConfigKey("moe_intermediate_size", "moe_intermediate_size", "{arch}.expert_feed_forward_length", int, 2048,
                  positive=True),
        ConfigKey("n_routed_experts", "n_routed_experts", "{arch}.expert_count", int, 256, positive=True),
        ConfigKey("n_shared_experts", "n_shared_experts", "{arch}.expert_shared_count", int, 1),
        ConfigKey("num_experts_per_tok", "num_experts_per_tok", "{arch}.expert_used_count", int, 8, positive=True),
        ConfigKey("n_group", "n_group", "{arch}.expert_group_count", int, 8, positive=True),
        ConfigKey("topk_group", "topk_group", "{arch}.expert_group_used_count", int, 4, positive=True),
        ConfigKey("routed_scaling_factor", "routed_scaling_factor", "{arch}.expert_weights_scale", float, 2.5),
        ConfigKey("norm_topk_prob", "norm_topk_prob", "{arch}.expert_weights_norm", bool, True),
        ConfigKey("first_k_dense_replace", "first_k_dense_replace", "{arch}.leading_dense_block_count", int, 3),
    )

    @classmethod
    def hf_values(cls, data: Mapping[str, Any], where: str) -> dict[str, Any]:
        """The base's values, the expert count under its config name."""
        values = super().hf_values(data, where)
        if "num_local_experts" in data:
            values.setdefault("n_routed_experts", data["num_local_experts"])
        return values

    @classmethod
    def gguf_values(cls, metadata: Mapping[str, Any], tensor_names: Collection[str], arch: str) -> dict[str, Any]:
        """The unrotated head size from ``key_length_mla``; refuses softmax routing (DeepSeek-V2)."""
        gating = metadata.get(f"{arch}.expert_gating_func", gguf.ExpertGatingFuncType.SOFTMAX)
        if gating != gguf.ExpertGatingFuncType.SIGMOID:
            raise UnsupportedModelError(f"{metadata.get('general.name', arch)} routes its experts by softmax "
                                        "(DeepSeek-V2); pyagent's deepseek3 runs DeepSeek-V3's sigmoid routing")
        values = dict(metadata)
        key, rope = metadata.get(f"{arch}.attention.key_length_mla"), metadata.get(f"{arch}.rope.dimension_count")
        if isinstance(key, int) and isinstance(rope, int):
            values[f"{arch}.attention.nope_length"] = key - rope
        values.setdefault(f"{arch}.expert_weights_scale", 1.0)
        values.setdefault(f"{arch}.expert_weights_norm", False)
        values.setdefault(f"{arch}.expert_group_count", 1)
        values.setdefault(f"{arch}.expert_group_used_count", 1)
        return values

    @classmethod
    def derive(cls, values: dict[str, Any]) -> dict[str, Any]:
        """Every head has its keys and values (MLA expands the latent); ``head_dim`` is the rotated part."""
        if values["n_routed_experts"] % values["n_group"] or values["topk_group"] > values["n_group"]:
            raise ModelFormatError(f"deepseek3 config: n_group ({values['n_group']}) must divide n_routed_experts "
                                   f"({values['n_routed_experts']}) and hold topk_group ({values['topk_group']})")
        return {**values, "num_kv_heads": values["num_heads"], "head_dim": values["qk_rope_head_dim"]}

    @classmethod
    def hf_extra(cls, config: ModelConfig) -> dict[str, Any]:
        """The key/value head count transformers expects (every head), SiLU, and ``q_lora_rank: null`` for
        full-rank queries (transformers' default is a rank)."""
        extra: dict[str, Any] = {"num_key_value_heads": config.num_heads, "hidden_act": "silu"}
        if config.settings.get("q_lora_rank") is None:
            extra["q_lora_rank"] = None
        return extra

    @classmethod
    def weight_shapes(cls, config: ModelConfig) -> dict[str, tuple[int, ...]]:
        """The embedding, each layer's norms, latent attention and feed-forward, the final norm, the head."""
        hidden, heads, s = config.hidden_size, config.num_heads, config.settings
        nope, rope, v_dim, rank = s["qk_nope_head_dim"], s["qk_rope_head_dim"], s["v_head_dim"], s["kv_lora_rank"]
        q_rank = s.get("q_lora_rank")
        shapes = cls.outer_shapes(config)
        for i in range(config.num_layers):
            p, a, m = layer_prefix(i), layer_prefix(i) + "self_attn.", layer_prefix(i) + "mlp."
            shapes |= {p + "input_layernorm.weight": (hidden,), p + "post_attention_layernorm.weight": (hidden,),
                       a + "kv_a_proj_with_mqa.weight": (rank + rope, hidden), a + "kv_a_layernorm.weight": (rank,),
                       a + "kv_b_proj.weight": (heads * (nope + v_dim), rank),
                       a + "o_proj.weight": (hidden, heads * v_dim)}
            if q_rank is None:
                shapes[a + "q_proj.weight"] = (heads * (nope + rope), hidden)
            else:
                shapes |= {a + "q_a_proj.weight": (q_rank, hidden), a + "q_a_layernorm.weight": (q_rank,),
                           a + "q_b_proj.weight": (heads * (nope + rope), q_rank)}
            if i < s["first_k_dense_replace"]:
                inter = config.intermediate_size
                shapes |= {m + "gate_proj.weight": (inter, hidden), m + "up_proj.weight": (inter, hidden),
                           m + "down_proj.weight": (hidden, inter)}
                continue
            inter, experts = s["moe_intermediate_size"], s["n_routed_experts"]
            shapes |= {m + "gate.weight": (experts, hidden), m + "gate.e_score_correction_bias": (experts,)}
            for name in expert_names(m, experts):
                shapes[name] = (hidden, inter) if name.endswith("down_proj.weight") else (inter, hidden)
            if s["n_shared_experts"]:
                shared = inter * s["n_shared_experts"]
                shapes |= {m + "shared_experts.gate_proj.weight": (shared, hidden),
                           m + "shared_experts.up_proj.weight": (shared, hidden),
                           m + "shared_experts.down_proj.weight": (hidden, shared)}
        return shapes

    @classmethod
    def sparse(cls, config: ModelConfig, layer: int) -> bool:
        """Whether ``layer``'s feed-forward is a mixture of experts."""
        return layer >= config.settings["first_k_dense_replace"]

    @classmethod
    def gguf_tensor_names(cls, config: ModelConfig) -> dict[str, str]:
        """The mapped names; the split ``kv_b_proj`` and the stacked experts under their GGUF names, the
        score bias as ``exp_probs_b.bias``."""
        experts = config.settings["n_routed_experts"]
        converted = {layer_prefix(i) + "self_attn.kv_b_proj.weight" for i in range(config.num_layers)}
        for i in range(config.num_layers):
            if cls.sparse(config, i):
                m = layer_prefix(i) + "mlp."
                converted |= {*expert_names(m, experts), m + "gate.e_score_correction_bias"}
        names = cls.mapped_gguf_names(config, skip=converted)
        for i in range(config.num_layers):
            names |= {f"blk.{i}.{n}.weight": f"blk.{i}.{n}.weight" for n in ("attn_k_b", "attn_v_b")}
            if cls.sparse(config, i):
                names[f"blk.{i}.exp_probs_b.bias"] = layer_prefix(i) + "mlp.gate.e_score_correction_bias"
                names |= expert_gguf_names(i)
        return names

    @classmethod
    def gguf_restore(cls, config: ModelConfig, weights: dict[str, Any]) -> dict[str, Any]:
        """``kv_b_proj`` from ``attn_k_b`` (``[heads, rank, nope]``) and ``attn_v_b`` (``[heads, v, rank]``);
        the experts unstacked."""
        rank = config.settings["kv_lora_rank"]
        for i in range(config.num_layers):
            keys = weights.pop(f"blk.{i}.attn_k_b.weight")
            values = weights.pop(f"blk.{i}.attn_v_b.weight")
            weights[layer_prefix(i) + "self_attn.kv_b_proj.weight"] = torch.cat(
                (keys.transpose(1, 2), values), dim=1).reshape(-1, rank)
            if cls.sparse(config, i):
                unstack_experts(weights, i, layer_prefix(i) + "mlp.")
        return weights

    @classmethod
    def cache_layout(cls, config: ModelConfig) -> CacheLayout:
        """Every layer keeps the latent and the rotated key of each token."""
        latent = LatentKV(config.settings["kv_lora_rank"], config.settings["qk_rope_head_dim"])
        return CacheLayout([latent] * config.num_layers)

    @classmethod
    def mixer_families(cls, config: ModelConfig) -> tuple[str, ...]:
        """Latent attention."""
        return ("mla",)

    def build_blocks(self, reader: WeightReader) -> list[Block]:
        """Per layer its norms, its latent attention and its dense or expert feed-forward."""
        cfg, s = self.config, self.config.settings
        nope, rope_dim, v_dim, rank = s["qk_nope_head_dim"], s["qk_rope_head_dim"], s["v_head_dim"], s["kv_lora_rank"]
        rope = Rope.build(rope_dim, cfg.rope_theta, cfg.max_position_embeddings, self.dtype, s["rope_interleave"])
        routing = Routing(top_k=s["num_experts_per_tok"], scoring="sigmoid", normalize=s["norm_topk_prob"],
                          scale=s["routed_scaling_factor"], groups=s["n_group"], topk_groups=s["topk_group"])
        sizes = (cfg.num_heads, nope, rope_dim, v_dim, rank)
        blocks = []
        for i in range(cfg.num_layers):
            p, a = layer_prefix(i), layer_prefix(i) + "self_attn."
            low_rank = s.get("q_lora_rank") is not None
            mix = latent_attention_mix(reader.matrix(a + "q_a_proj.weight") if low_rank else None,
                                       reader.tensor(a + "q_a_layernorm.weight") if low_rank else None,
                                       reader.matrix(a + ("q_b_proj.weight" if low_rank else "q_proj.weight")),
                                       reader.matrix(a + "kv_a_proj_with_mqa.weight"),
                                       reader.tensor(a + "kv_a_layernorm.weight"),
                                       reader.tensor(a + "kv_b_proj.weight"),
                                       reader.matrix(a + "o_proj.weight"), rope, sizes, (nope + rope_dim) ** -0.5)
            blocks.append(Block(reader.tensor(p + "input_layernorm.weight"), mix,
                                reader.tensor(p + "post_attention_layernorm.weight"), self._ffn(reader, i, routing)))
        return blocks

    def _ffn(self, reader: WeightReader, layer: int, routing: Routing) -> FeedForward:
        m = layer_prefix(layer) + "mlp."
        if not self.sparse(self.config, layer):
            return swiglu_ffn(reader.matrix(m + "gate_proj.weight", m + "up_proj.weight"),
                              reader.matrix(m + "down_proj.weight"))
        gate_up, down = load_experts(reader, m, self.config.settings["n_routed_experts"])
        shared = self.config.settings["n_shared_experts"]
        weights = MoeWeights(
            router=reader.tensor(m + "gate.weight"), gate_up=gate_up, down=down,
            bias=reader.weights[m + "gate.e_score_correction_bias"].float(),
            shared_gate_up=reader.matrix(m + "shared_experts.gate_proj.weight",
                                         m + "shared_experts.up_proj.weight") if shared else None,
            shared_down=reader.matrix(m + "shared_experts.down_proj.weight") if shared else None)
        return lambda x, threads: moe_forward(x, weights, routing, threads)
