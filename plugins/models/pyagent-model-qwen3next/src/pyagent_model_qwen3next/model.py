"""The Qwen3-Next decoder (``Qwen3NextForCausalLM``, GGUF ``qwen3next``).

Layers are ``linear_attention`` (Gated DeltaNet) or ``full_attention`` as ``layer_types`` says;
every norm is ``rmsnorm(x) * (1 + w)`` (the ``1`` added at load). Each layer's feed-forward is a
mixture of experts (softmax routing, top-k renormalised when ``norm_topk_prob``, a shared expert
scaled by ``sigmoid(x @ shared_expert_gate)``), or a dense SwiGLU on ``mlp_only_layers`` and off the
``decoder_sparse_step``.

- **Gated DeltaNet.** ``in_proj_qkvz`` holds per key head ``[q, k, v, z]`` (``v`` and ``z`` of its
  ``value_heads / key_heads`` value heads); the rows are regrouped at load into ``[q | k | v]`` (the
  convolution's channels) and ``z``, the layout llama.cpp's converter writes (``attn_qkv`` and
  ``attn_gate``). A causal convolution with SiLU (``short_conv``) runs over ``q, k, v``; ``q`` and
  ``k`` are L2-normalized (``x * rsqrt(sum(x ** 2) + 1e-6)``); ``in_proj_ba`` gives per value head
  ``beta = sigmoid(b)`` and ``g = -exp(A_log) * softplus(a + dt_bias)``; the gated delta rule
  (``gated_delta``, scale ``key_dim ** -0.5``) gives ``o``, normalized per head and gated by
  ``silu(z)``, then ``out_proj``.
- **Gated attention.** ``q_proj`` gives per head the query and a gate; q/k RMSNorm, rotate-half RoPE
  on the first ``partial_rotary_factor`` of each head, attention, ``* sigmoid(gate)``, ``o_proj``.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any, ClassVar

import attrs
import gguf
import torch
import torch.nn.functional as F

from pyagent_core.errors import ModelFormatError
from pyagent_core.interfaces.cache import CacheLayout, LayerCache, PagedKV, RecurrentState
from pyagent_core.interfaces.model import ConfigKey, ModelConfig, ModelContext
from pyagent_model_base.decoder import layer_prefix
from pyagent_model_base.hybrid import (
    Block,
    FeedForward,
    HybridLM,
    Mix,
    Step,
    WeightReader,
    attention_mix,
    common_keys,
    read_layer_types,
    swiglu_ffn,
)
from pyagent_model_base.layers import Rope, Weight, dense, norm_then_gate
from pyagent_model_base.moe import (
    MoeWeights,
    Routing,
    expert_gguf_names,
    expert_names,
    load_experts,
    moe_forward,
    unstack_experts,
)

LINEAR, FULL = "linear_attention", "full_attention"


def qkvz_order(key_heads: int, key_dim: int, value_heads: int, value_dim: int) -> torch.Tensor:
    """The rows of ``in_proj_qkvz`` (per key head ``[q, k, v, z]``) in the order ``[q | k | v | z]``."""
    per_v = value_heads // key_heads * value_dim
    widths = (key_dim, key_dim, per_v, per_v)
    group = sum(widths)
    starts = [0, key_dim, 2 * key_dim, 2 * key_dim + per_v]
    return torch.cat([torch.arange(h * group + start, h * group + start + width)
                      for start, width in zip(starts, widths, strict=True) for h in range(key_heads)])


def ba_order(key_heads: int, value_heads: int) -> torch.Tensor:
    """The rows of ``in_proj_ba`` (per key head ``[b, a]``) in the order ``[b | a]``."""
    per = value_heads // key_heads
    return torch.cat([torch.arange(h * 2 * per + start, h * 2 * per + start + per)
                      for start in (0, per) for h in range(key_heads)])


def l2_normalized(x: torch.Tensor) -> torch.Tensor:
    """``x * rsqrt(sum(x ** 2) + 1e-6)`` over the last dimension, in float32 (flash-linear-attention's)."""
    values = x.float()
    return values * torch.rsqrt((values * values).sum(dim=-1, keepdim=True) + 1e-6)


def delta_net_mix(qkv: Weight, z: Weight, ba: Weight, conv: torch.Tensor, A: torch.Tensor, dt_bias: torch.Tensor,
                  norm: torch.Tensor, out_proj: Weight, sizes: tuple[int, int, int, int], eps: float) -> Mix:
    """A Gated DeltaNet layer's mix (module docstring); ``sizes`` is ``(key_heads, key_dim, value_heads,
    value_dim)``, ``qkv``, ``z`` and ``ba`` already in the grouped order."""
    key_heads, key_dim, value_heads, value_dim = sizes
    keys = key_heads * key_dim

    def mix(x: torch.Tensor, step: Step, layer: int) -> torch.Tensor:
        tokens, mixer = x.shape[0], step.mixer
        assert mixer is not None
        conv_state, state = step.caches[layer]
        mixed = mixer.short_conv(dense(x, qkv, step.threads).contiguous(), conv, None, conv_state, step.metadata,
                                 layer, activation="silu")
        q, k, v = mixed.split((keys, keys, value_heads * value_dim), dim=-1)
        b, a = dense(x, ba, step.threads).chunk(2, dim=-1)
        g = -A * F.softplus(a.float() + dt_bias)
        o = mixer.gated_delta(l2_normalized(q.reshape(tokens, key_heads, key_dim)).to(x.dtype),
                              l2_normalized(k.reshape(tokens, key_heads, key_dim)).to(x.dtype),
                              v.reshape(tokens, value_heads, value_dim).contiguous(), g.contiguous(),
                              torch.sigmoid(b).contiguous(), state, step.metadata, layer, key_dim**-0.5)
        gate = dense(x, z, step.threads).reshape(tokens, value_heads, value_dim)
        return dense(norm_then_gate(o, gate, norm, eps).reshape(tokens, -1), out_proj, step.threads)

    return mix


class Qwen3Next(HybridLM):
    """``Qwen3NextForCausalLM`` and GGUF ``qwen3next`` files."""

    hf_architecture = "Qwen3NextForCausalLM"
    model_type = "qwen3_next"
    gguf_arch = gguf.MODEL_ARCH.QWEN3NEXT
    config_keys: ClassVar[tuple[ConfigKey, ...]] = (
        *common_keys("vocab_size", "hidden_size", "intermediate_size", "num_layers", "num_heads", "num_kv_heads",
                     "head_dim", "rope_theta", "rms_norm_eps", "max_position_embeddings", "tie_word_embeddings",
                     head_dim=256),
        ConfigKey("partial_rotary_factor", "partial_rotary_factor", "{arch}.rope.partial_factor", float, 0.25,
                  positive=True),
        ConfigKey("linear_conv_kernel_dim", "linear_conv_kernel_dim", "{arch}.ssm.conv_kernel", int, 4, positive=True),
        ConfigKey("linear_key_head_dim", "linear_key_head_dim", "{arch}.ssm.state_size", int, 128, positive=True),
        ConfigKey("linear_value_head_dim", "linear_value_head_dim", "{arch}.ssm.value_head_dim", int, 128,
                  positive=True),
        ConfigKey("linear_num_key_heads", "linear_num_key_heads", "{arch}.ssm.group_count", int, 16, positive=True),
        ConfigKey("linear_num_value_heads", "linear_num_value_heads", "{arch}.ssm.time_step_rank", int, 32,
                  positive=True),
        ConfigKey("decoder_sparse_step", "decoder_sparse_step", None, int, 1, positive=True),
        ConfigKey("moe_intermediate_size", "moe_intermediate_size", "{arch}.expert_feed_forward_length", int, 512,
                  positive=True),
        ConfigKey("shared_expert_intermediate_size", "shared_expert_intermediate_size",
                  "{arch}.expert_shared_feed_forward_length", int, 512, positive=True),
        ConfigKey("num_experts_per_tok", "num_experts_per_tok", "{arch}.expert_used_count", int, 10, positive=True),
        ConfigKey("num_experts", "num_experts", "{arch}.expert_count", int, 512),
        ConfigKey("norm_topk_prob", "norm_topk_prob", None, bool, True),
    )

    @classmethod
    def hf_settings(cls, data: Mapping[str, Any], num_layers: int, where: str) -> dict[str, Any]:
        """The layer types (``layer_types``, else every ``full_attention_interval``-th layer attends) and
        the layers with a dense MLP."""
        types = data.get("layer_types")
        if types is None:
            interval = data.get("full_attention_interval", 4)
            types = [LINEAR if (i + 1) % interval else FULL for i in range(num_layers)]
        dense_layers = data.get("mlp_only_layers") or []
        if not isinstance(dense_layers, list) or any(type(i) is not int for i in dense_layers):
            raise ModelFormatError(f"{where}: mlp_only_layers must list layer indices, got {dense_layers!r}")
        return {"layer_types": read_layer_types(types, num_layers, (LINEAR, FULL), where),
                "mlp_only_layers": tuple(dense_layers)}

    @classmethod
    def gguf_values(cls, metadata: Mapping[str, Any], tensor_names: Collection[str], arch: str) -> dict[str, Any]:
        """The value heads' size from ``ssm.inner_size``, the partial RoPE from ``rope.dimension_count``."""
        values = dict(metadata)
        inner, heads = metadata.get(f"{arch}.ssm.inner_size"), metadata.get(f"{arch}.ssm.time_step_rank")
        if isinstance(inner, int) and isinstance(heads, int) and heads:
            values[f"{arch}.ssm.value_head_dim"] = inner // heads
        rotated, head_dim = metadata.get(f"{arch}.rope.dimension_count"), metadata.get(f"{arch}.attention.key_length")
        if isinstance(rotated, int) and isinstance(head_dim, int) and head_dim:
            values[f"{arch}.rope.partial_factor"] = rotated / head_dim
        return values

    @classmethod
    def gguf_settings(cls, metadata: Mapping[str, Any], tensor_names: Collection[str], num_layers: int,
                      where: str) -> dict[str, Any]:
        """Every ``full_attention_interval``-th layer attends; every layer has experts."""
        interval = metadata.get(f"{metadata.get('general.architecture')}.full_attention_interval", 4)
        return {"layer_types": tuple(LINEAR if (i + 1) % interval else FULL for i in range(num_layers)),
                "mlp_only_layers": ()}

    @classmethod
    def hf_extra(cls, config: ModelConfig) -> dict[str, Any]:
        """The layer types, the dense layers and SiLU."""
        return {"layer_types": list(config.settings["layer_types"]),
                "mlp_only_layers": list(config.settings["mlp_only_layers"]), "hidden_act": "silu"}

    @classmethod
    def sparse(cls, config: ModelConfig, layer: int) -> bool:
        """Whether ``layer``'s feed-forward is a mixture of experts."""
        s = config.settings
        return (layer not in s["mlp_only_layers"] and s["num_experts"] > 0
                and (layer + 1) % s["decoder_sparse_step"] == 0)

    @classmethod
    def sizes(cls, config: ModelConfig) -> tuple[int, int, int, int]:
        """``(key_heads, key_dim, value_heads, value_dim)`` of the Gated DeltaNet layers."""
        s = config.settings
        return (s["linear_num_key_heads"], s["linear_key_head_dim"], s["linear_num_value_heads"],
                s["linear_value_head_dim"])

    @classmethod
    def weight_shapes(cls, config: ModelConfig) -> dict[str, tuple[int, ...]]:
        """The embedding, each layer's norms, mixer and feed-forward, the final norm and (untied) the head."""
        hidden, dim, s = config.hidden_size, config.head_dim, config.settings
        key_heads, key_dim, value_heads, value_dim = cls.sizes(config)
        conv_dim = 2 * key_heads * key_dim + value_heads * value_dim
        shapes = cls.outer_shapes(config)
        for i, kind in enumerate(s["layer_types"]):
            p = layer_prefix(i)
            shapes |= {p + "input_layernorm.weight": (hidden,), p + "post_attention_layernorm.weight": (hidden,)}
            if kind == LINEAR:
                a = p + "linear_attn."
                shapes |= {a + "in_proj_qkvz.weight": (conv_dim + value_heads * value_dim, hidden),
                           a + "in_proj_ba.weight": (2 * value_heads, hidden),
                           a + "conv1d.weight": (conv_dim, 1, s["linear_conv_kernel_dim"]),
                           a + "dt_bias": (value_heads,), a + "A_log": (value_heads,), a + "norm.weight": (value_dim,),
                           a + "out_proj.weight": (hidden, value_heads * value_dim)}
            else:
                a = p + "self_attn."
                q, kv = config.num_heads * dim, config.num_kv_heads * dim
                shapes |= {a + "q_proj.weight": (2 * q, hidden), a + "k_proj.weight": (kv, hidden),
                           a + "v_proj.weight": (kv, hidden), a + "o_proj.weight": (hidden, q),
                           a + "q_norm.weight": (dim,), a + "k_norm.weight": (dim,)}
            m = p + "mlp."
            if cls.sparse(config, i):
                inter, shared = s["moe_intermediate_size"], s["shared_expert_intermediate_size"]
                shapes[m + "gate.weight"] = (s["num_experts"], hidden)
                for name in expert_names(m, s["num_experts"]):
                    shapes[name] = (hidden, inter) if name.endswith("down_proj.weight") else (inter, hidden)
                shapes |= {m + "shared_expert.gate_proj.weight": (shared, hidden),
                           m + "shared_expert.up_proj.weight": (shared, hidden),
                           m + "shared_expert.down_proj.weight": (hidden, shared),
                           m + "shared_expert_gate.weight": (1, hidden)}
            else:
                inter = config.intermediate_size
                shapes |= {m + "gate_proj.weight": (inter, hidden), m + "up_proj.weight": (inter, hidden),
                           m + "down_proj.weight": (hidden, inter)}
        return shapes

    @classmethod
    def norm_names(cls, config: ModelConfig) -> list[str]:
        """The ``1 + w`` norms (every norm but Gated DeltaNet's output norm)."""
        return [name for name in cls.weight_shapes(config)
                if name.endswith("norm.weight") and not name.endswith("linear_attn.norm.weight")]

    @classmethod
    def gguf_weight_offsets(cls, config: ModelConfig) -> dict[str, float]:
        """llama.cpp's converter stores the ``1 + w`` norms with the ``1`` added."""
        return dict.fromkeys(cls.norm_names(config), 1.0)

    @classmethod
    def gguf_tensor_names(cls, config: ModelConfig) -> dict[str, str]:
        """The mapped names; the converted tensors (Gated DeltaNet's projections, kernel and ``A``, the
        stacked experts) under their GGUF names."""
        s = config.settings
        converted = {f"{layer_prefix(i)}linear_attn.{n}" for i, kind in enumerate(s["layer_types"]) if kind == LINEAR
                     for n in ("in_proj_qkvz.weight", "conv1d.weight", "A_log", "dt_bias")}
        converted |= {name for i in range(config.num_layers) if cls.sparse(config, i)
                      for name in expert_names(layer_prefix(i) + "mlp.", s["num_experts"])}
        # llama.cpp's qwen3next has experts on every layer; a dense layer's MLP gets the generic names
        dense = {f"{gguf.TENSOR_NAMES[t].format(bid=i)}.weight": f"{layer_prefix(i)}mlp.{proj}.weight"
                 for i in range(config.num_layers) if not cls.sparse(config, i)
                 for t, proj in ((gguf.MODEL_TENSOR.FFN_GATE, "gate_proj"), (gguf.MODEL_TENSOR.FFN_UP, "up_proj"),
                                 (gguf.MODEL_TENSOR.FFN_DOWN, "down_proj"))}
        names = cls.mapped_gguf_names(config, skip=converted | set(dense.values())) | dense
        for i, kind in enumerate(s["layer_types"]):
            if kind == LINEAR:
                names[f"blk.{i}.ssm_dt.bias"] = f"{layer_prefix(i)}linear_attn.dt_bias"
                names |= {f"blk.{i}.{n}": f"blk.{i}.{n}" for n in ("attn_qkv.weight", "attn_gate.weight",
                                                                  "ssm_conv1d.weight", "ssm_a")}
            if cls.sparse(config, i):
                names |= expert_gguf_names(i)
        return names

    @classmethod
    def gguf_restore(cls, config: ModelConfig, weights: dict[str, Any]) -> dict[str, Any]:
        """``in_proj_qkvz`` from ``attn_qkv`` and ``attn_gate`` (back to per-key-head groups), the kernel
        unsqueezed, ``A_log = log(-ssm_a)``, the experts unstacked."""
        order = qkvz_order(*cls.sizes(config))
        for i, kind in enumerate(config.settings["layer_types"]):
            a, g = f"{layer_prefix(i)}linear_attn.", f"blk.{i}."
            if kind == LINEAR:
                grouped = torch.cat((weights.pop(g + "attn_qkv.weight"), weights.pop(g + "attn_gate.weight")))
                weights[a + "in_proj_qkvz.weight"] = grouped[order.argsort()]
                weights[a + "conv1d.weight"] = weights.pop(g + "ssm_conv1d.weight")[:, None]
                weights[a + "A_log"] = torch.log(-weights.pop(g + "ssm_a").reshape(-1))
            if cls.sparse(config, i):
                unstack_experts(weights, i, layer_prefix(i) + "mlp.")
        return weights

    @classmethod
    def cache_layout(cls, config: ModelConfig) -> CacheLayout:
        """Gated DeltaNet layers keep a convolution window and a ``[value_heads, key_dim, value_dim]`` state
        per sequence; attention layers paged keys and values."""
        key_heads, key_dim, value_heads, value_dim = cls.sizes(config)
        state = RecurrentState("gated_deltanet", ("conv", "recurrent"),
                               ((2 * key_heads * key_dim + value_heads * value_dim,
                                 config.settings["linear_conv_kernel_dim"] - 1), (value_heads, key_dim, value_dim)))
        paged = PagedKV(config.num_kv_heads, config.head_dim)
        layers: list[LayerCache] = [state if kind == LINEAR else paged for kind in config.settings["layer_types"]]
        return CacheLayout(layers)

    @classmethod
    def mixer_families(cls, config: ModelConfig) -> tuple[str, ...]:
        """The convolution and the delta rule, when some layer is Gated DeltaNet."""
        return ("short_conv", "gated_delta") if LINEAR in config.settings["layer_types"] else ()

    def __init__(self, options: Mapping[str, Any], context: ModelContext) -> None:
        ones = set(self.norm_names(context.config))
        weights = {name: w + 1.0 if name in ones else w for name, w in context.weights.items()}
        super().__init__(options, attrs.evolve(context, weights=weights))

    def build_blocks(self, reader: WeightReader) -> list[Block]:
        """Per layer its norms, its Gated DeltaNet or gated attention, and its feed-forward."""
        cfg, s = self.config, self.config.settings
        sizes = self.sizes(cfg)
        order, ba = qkvz_order(*sizes), ba_order(sizes[0], sizes[2])
        conv_dim = 2 * sizes[0] * sizes[1] + sizes[2] * sizes[3]
        rope = Rope.build(int(cfg.head_dim * s["partial_rotary_factor"]), cfg.rope_theta, cfg.max_position_embeddings,
                          self.dtype)
        routing = Routing(top_k=s["num_experts_per_tok"], scoring="softmax", normalize=s["norm_topk_prob"])
        blocks = []
        for i, kind in enumerate(s["layer_types"]):
            p = layer_prefix(i)
            mix: Mix
            if kind == LINEAR:
                a = p + "linear_attn."
                qkvz = reader.tensor(a + "in_proj_qkvz.weight")[order]
                mix = delta_net_mix(qkvz[:conv_dim].contiguous(), qkvz[conv_dim:].contiguous(),
                                    reader.tensor(a + "in_proj_ba.weight")[ba].contiguous(),
                                    reader.tensor(a + "conv1d.weight")[:, 0].contiguous(),
                                    torch.exp(reader.weights[a + "A_log"].float()),
                                    reader.tensor(a + "dt_bias").float(), reader.tensor(a + "norm.weight"),
                                    reader.matrix(a + "out_proj.weight"), sizes, cfg.rms_norm_eps)
            else:
                a = p + "self_attn."
                mix = attention_mix(reader.matrix(a + "q_proj.weight", a + "k_proj.weight", a + "v_proj.weight"),
                                    reader.matrix(a + "o_proj.weight"), cfg.num_heads, cfg.num_kv_heads, cfg.head_dim,
                                    q_norm=reader.tensor(a + "q_norm.weight"),
                                    k_norm=reader.tensor(a + "k_norm.weight"), eps=cfg.rms_norm_eps, rope=rope,
                                    gated=True)
            blocks.append(Block(reader.tensor(p + "input_layernorm.weight"), mix,
                                reader.tensor(p + "post_attention_layernorm.weight"), self._ffn(reader, i, routing)))
        return blocks

    def _ffn(self, reader: WeightReader, layer: int, routing: Routing) -> FeedForward:
        m = layer_prefix(layer) + "mlp."
        if not self.sparse(self.config, layer):
            return swiglu_ffn(reader.matrix(m + "gate_proj.weight", m + "up_proj.weight"),
                              reader.matrix(m + "down_proj.weight"))
        gate_up, down = load_experts(reader, m, self.config.settings["num_experts"])
        weights = MoeWeights(router=reader.tensor(m + "gate.weight"), gate_up=gate_up, down=down,
                             shared_gate_up=reader.matrix(m + "shared_expert.gate_proj.weight",
                                                          m + "shared_expert.up_proj.weight"),
                             shared_down=reader.matrix(m + "shared_expert.down_proj.weight"),
                             shared_gate=reader.tensor(m + "shared_expert_gate.weight"))
        return lambda x, threads: moe_forward(x, weights, routing, threads)
