"""The Gemma 2 and Gemma 3 decoders (text): Llama's layers with Gemma's differences.

- the embedding scaled by ``sqrt(hidden_size)`` (rounded to the working dtype, as transformers does);
- every RMSNorm weight ``w`` applied as ``1 + w`` (added once at load: llama.cpp's converter already
  stores ``1 + w`` in GGUF files, which :meth:`Gemma2.gguf_weight_offsets` says);
- norms before and after both attention and MLP (``post_attention_layernorm`` normalizes the
  attention output, ``pre_feedforward_layernorm`` the MLP input, ``post_feedforward_layernorm`` its
  output);
- a GeGLU MLP: ``gelu(gate, tanh approximation) * up``;
- scores scaled by ``query_pre_attn_scalar ** -0.5``; sliding-window and global layers as
  ``layer_types`` says;
- Gemma 2: attention scores and final logits soft-capped;
- Gemma 3: per-head q/k RMSNorm, its local layers rotated with their own RoPE base and the global ones
  with ``rope_theta`` (linearly scaled when the config says so).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any, ClassVar

import attrs
import gguf
import torch
import torch.nn.functional as F

from pyagent_core.errors import ModelFormatError, UnsupportedModelError
from pyagent_core.interfaces.attention import AttentionBackend, AttentionContext, AttentionMetadata
from pyagent_core.interfaces.model import ConfigKey, ModelConfig, ModelContext
from pyagent_kernels import PreparedCall
from pyagent_kernels.layer_ops import prepare_add_rms_norm, prepare_rope_split
from pyagent_kernels.linear import prepare_linear
from pyagent_model_base.decoder import DecoderLM, layer_prefix
from pyagent_model_base.layout import DecoderLayout
from pyagent_model_base.step_plan import LayerWeights, StepPlan, Workspace, head_rms_norm, torch_step

SLIDING, FULL = "sliding_attention", "full_attention"
#: The extra norms of a Gemma layer, after ``model.layers.N.``.
MLP_NORMS = ("pre_feedforward_layernorm", "post_feedforward_layernorm")


@attrs.frozen(eq=False)
class GemmaLayer:
    """A layer's weights beyond :class:`LayerWeights` (whose ``post_norm`` is Gemma's
    ``post_attention_layernorm``, applied to the attention output)."""

    pre_mlp_norm: torch.Tensor
    post_mlp_norm: torch.Tensor


class Gemma2(DecoderLM):
    """``Gemma2ForCausalLM`` and GGUF ``gemma2`` files."""

    hf_architecture = "Gemma2ForCausalLM"
    model_type = "gemma2"
    gguf_arch = gguf.MODEL_ARCH.GEMMA2
    layout = DecoderLayout()
    config_keys: ClassVar[tuple[ConfigKey, ...]] = (
        ConfigKey("query_pre_attn_scalar", "query_pre_attn_scalar", None, float, 256.0, positive=True),
        ConfigKey("sliding_window", "sliding_window", "{arch}.attention.sliding_window", int, None, positive=True),
        ConfigKey("attn_logit_softcapping", "attn_logit_softcapping", "{arch}.attn_logit_softcapping", float, None,
                  positive=True),
        ConfigKey("final_logit_softcapping", "final_logit_softcapping", "{arch}.final_logit_softcapping", float,
                  None, positive=True),
    )
    #: Every second layer, from the first, attends within the window (transformers' default).
    sliding_pattern: ClassVar[int] = 2
    #: Local layers rotate with their own RoPE base (Gemma 3).
    local_rope: ClassVar[bool] = False

    @classmethod
    def check_hf_variant(cls, data: Mapping[str, Any], where: str) -> None:
        """The base's refusals, and what Gemma's layers here lack: bidirectional attention, another activation."""
        super().check_hf_variant(data, where)
        if data.get("use_bidirectional_attention"):
            raise UnsupportedModelError(f"{where} sets use_bidirectional_attention: true; pyagent runs causal "
                                        "attention only")
        activation = data.get("hidden_activation") or data.get("hidden_act") or "gelu_pytorch_tanh"
        if activation not in ("gelu_pytorch_tanh", "gelu_tanh"):
            raise UnsupportedModelError(f"{where} uses hidden_activation {activation!r}; pyagent's {cls.model_type} "
                                        "runs gelu_pytorch_tanh")

    @classmethod
    def config_from_hf(cls, data: Mapping[str, Any], architecture: str, where: str) -> ModelConfig:
        """The base's config with the layer types (``layer_types``, else the family's pattern)."""
        config = super().config_from_hf(data, architecture, where)
        types = data.get("layer_types")
        if types is None:
            types = cls.default_layer_types(config.num_layers, data)
        if (not isinstance(types, list) or len(types) != config.num_layers
                or any(t not in (SLIDING, FULL) for t in types)):
            raise ModelFormatError(f"{where}: layer_types must list {config.num_layers} entries of "
                                   f"{SLIDING!r} or {FULL!r}, got {types!r}")
        return attrs.evolve(config, settings={**config.settings, "layer_types": tuple(types)})

    @classmethod
    def default_layer_types(cls, num_layers: int, data: Mapping[str, Any]) -> list[str]:
        """transformers' default: every ``sliding_pattern``-th layer is global, the others local."""
        pattern = data.get("sliding_window_pattern", cls.sliding_pattern)
        return [SLIDING if (i + 1) % pattern else FULL for i in range(num_layers)]

    @classmethod
    def config_from_gguf(cls, metadata: Mapping[str, Any], tensor_names: Collection[str], architecture: str,
                         where: str) -> ModelConfig:
        """The base's config; GGUF files carry no layer types, so the family's pattern gives them, and
        the head size stands in for ``query_pre_attn_scalar`` as llama.cpp assumes."""
        config = super().config_from_gguf(metadata, tensor_names, architecture, where)
        types = tuple(cls.default_layer_types(config.num_layers, {}))
        return attrs.evolve(config, settings={**config.settings, "layer_types": types,
                                              "query_pre_attn_scalar": float(config.head_dim)})

    @classmethod
    def hf_config(cls, config: ModelConfig) -> dict[str, Any]:
        """The base's ``config.json`` with the layer types and Gemma's activation."""
        data = super().hf_config(config)
        data.pop("hidden_act", None)
        return {**data, "hidden_activation": "gelu_pytorch_tanh", "layer_types": list(config.settings["layer_types"])}

    @classmethod
    def weight_shapes(cls, config: ModelConfig) -> dict[str, tuple[int, ...]]:
        """The base's weights and the two MLP norms of every layer."""
        shapes = super().weight_shapes(config)
        for i in range(config.num_layers):
            shapes |= {f"{layer_prefix(i)}{name}.weight": (config.hidden_size,) for name in MLP_NORMS}
        return shapes

    @classmethod
    def norm_names(cls, config: ModelConfig) -> list[str]:
        """The RMSNorm weights, applied as ``1 + w``."""
        return [name for name in cls.weight_shapes(config) if name.endswith("norm.weight")]

    @classmethod
    def gguf_weight_offsets(cls, config: ModelConfig) -> dict[str, float]:
        """llama.cpp's converter stores Gemma's norm weights as ``1 + w``: a reader subtracts 1."""
        return dict.fromkeys(cls.norm_names(config), 1.0)

    @classmethod
    def windows(cls, config: ModelConfig) -> tuple[int | None, ...]:
        """Each layer's sliding window (``None`` on global layers)."""
        window = config.settings.get("sliding_window")
        return tuple(window if kind == SLIDING else None for kind in config.settings["layer_types"])

    @classmethod
    def attention_context(cls, config: ModelConfig, block_size: int, dtype: str) -> AttentionContext:
        """Scale ``query_pre_attn_scalar ** -0.5``, windows on the sliding layers, scores capped (Gemma 2)."""
        return attrs.evolve(super().attention_context(config, block_size, dtype),
                            scale=float(config.settings["query_pre_attn_scalar"] ** -0.5),
                            sliding_windows=cls.windows(config),
                            logits_soft_cap=config.settings.get("attn_logit_softcapping"))

    def __init__(self, options: Mapping[str, Any], context: ModelContext) -> None:
        offset = dict.fromkeys(self.norm_names(context.config), 1.0)
        weights = {name: w + offset[name] if name in offset else w for name, w in context.weights.items()}
        super().__init__(options, attrs.evolve(context, weights=weights))
        dtype = self.dtype
        self.extra = [GemmaLayer(*(weights[f"{layer_prefix(i)}{name}.weight"].to(self.device, dtype).contiguous()
                                   for name in MLP_NORMS))
                      for i in range(self.config.num_layers)]
        self.normalizer = torch.tensor(self.config.hidden_size**0.5, dtype=dtype)

    def _plan(self, workspace: Workspace, tokens: int, threads: int) -> StepPlan:
        return GemmaStepPlan(self, workspace, tokens, threads)

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor, kv_caches: Sequence[torch.Tensor],
                metadata: AttentionMetadata, attention: AttentionBackend, logits_indices: torch.Tensor,
                threads: int | None = None, lora_slots: torch.Tensor | None = None) -> torch.Tensor:
        """The base's forward, final logits soft-capped when the config says so."""
        logits = super().forward(input_ids, positions, kv_caches, metadata, attention, logits_indices, threads,
                                 lora_slots)
        cap = self.config.settings.get("final_logit_softcapping")
        return logits if cap is None else torch.tanh(logits / cap) * cap


class GemmaStepPlan(StepPlan):
    """A step of Gemma layers: per layer ``before`` adds the previous layer's normalized MLP output to
    ``hidden`` (the first layer scales the embedding instead), normalizes, projects, normalizes the
    q/k heads where the layer has them and rotates with the layer's RoPE tables; ``after`` projects
    the attention output, normalizes it into ``delta``, adds it to ``hidden``, normalizes that into
    the MLP, runs GeGLU and normalizes the MLP's output into ``delta``."""

    def __init__(self, model: Gemma2, workspace: Workspace, tokens: int, threads: int) -> None:
        super().__init__(model.config, model.layers, workspace, tokens, threads, model.precision, model.norm)
        precision = model.precision
        config = model.config
        heads, kv_heads, dim, eps = config.num_heads, config.num_kv_heads, config.head_dim, config.rms_norm_eps
        take = workspace.take
        normed, qkv, projected = take("normed", tokens), take("qkv", tokens), take("projected", tokens)
        gate_up, activated = take("gate_up", tokens), take("activated", tokens)
        inter = config.intermediate_size
        q_heads = qkv[:, : heads * dim].view(tokens, heads, dim)
        k_heads = qkv[:, heads * dim : (heads + kv_heads) * dim].view(tokens, kv_heads, dim)
        hidden, delta, normalizer = self.hidden, self.delta, model.normalizer
        self.local_cos, self.local_sin = (torch.empty((tokens, dim), dtype=self.cos.dtype) for _ in range(2))
        local = [kind == SLIDING for kind in config.settings["layer_types"]]

        def qk_norm(q_norm: torch.Tensor, k_norm: torch.Tensor) -> None:
            head_rms_norm(q_heads, q_norm, eps)
            head_rms_norm(k_heads, k_norm, eps)

        def geglu() -> None:
            torch.mul(F.gelu(gate_up[:, :inter], approximate="tanh"), gate_up[:, inter:], out=activated)

        def before(index: int, layer: LayerWeights) -> tuple[PreparedCall, ...]:
            calls = [torch_step("embed_scale", lambda: hidden.mul_(normalizer), (hidden,))] if index == 0 else []
            calls += [prepare_add_rms_norm(hidden, layer.input_norm, eps, delta if index else None, normed,
                                           threads=threads),
                      prepare_linear(normed, layer.qkv, qkv, threads=threads, precision=precision)]
            q_norm, k_norm = layer.q_norm, layer.k_norm
            if q_norm is not None and k_norm is not None:
                calls.append(torch_step("qk_norm", lambda: qk_norm(q_norm, k_norm), (qkv, q_norm, k_norm)))
            cos, sin = (self.local_cos, self.local_sin) if local[index] and model.local_rope else (self.cos, self.sin)
            calls.append(prepare_rope_split(qkv, cos, sin, heads, kv_heads, dim, (self.q, self.k, self.v),
                                            threads=threads))
            return tuple(calls)

        def after(layer: LayerWeights, extra: GemmaLayer) -> tuple[PreparedCall, ...]:
            return (
                prepare_linear(self.attended.view(tokens, heads * dim), layer.o_proj, projected, threads=threads,
                               precision=precision),
                prepare_add_rms_norm(projected, layer.post_norm, eps, None, delta, threads=threads),
                prepare_add_rms_norm(hidden, extra.pre_mlp_norm, eps, delta, normed, threads=threads),
                prepare_linear(normed, layer.gate_up, gate_up, threads=threads, precision=precision),
                torch_step("geglu", geglu, (gate_up, activated)),
                prepare_linear(activated, layer.down, projected, threads=threads, precision=precision),
                prepare_add_rms_norm(projected, extra.post_mlp_norm, eps, None, delta, threads=threads),
            )

        self.calls = [(before(i, layer), after(layer, extra))
                      for i, (layer, extra) in enumerate(zip(self.layers, model.extra, strict=True))]


class Gemma3(Gemma2):
    """``Gemma3ForCausalLM`` (``gemma3_text``) and GGUF ``gemma3`` files: q/k norms, five local layers
    to one global, local layers with their own RoPE base."""

    hf_architecture = "Gemma3ForCausalLM"
    model_type = "gemma3_text"
    gguf_arch = gguf.MODEL_ARCH.GEMMA3
    layout = DecoderLayout(qk_norm=True)
    sliding_pattern = 6
    config_keys = (*Gemma2.config_keys,
                   ConfigKey("rope_local_theta", "rope_local_base_freq", "{arch}.rope.freq_base_swa", float,
                             10000.0, positive=True),
                   ConfigKey("rope_scaling_factor", "rope_scaling_factor", None, float, 1.0, positive=True))

    @classmethod
    def check_hf_variant(cls, data: Mapping[str, Any], where: str) -> None:
        """Gemma 2's refusals, with Gemma 3's RoPE per layer type read by :meth:`config_from_hf`."""
        rope = data.get("rope_parameters")
        per_type = isinstance(rope, dict) and (SLIDING in rope or FULL in rope)
        super().check_hf_variant({k: v for k, v in data.items()
                                  if k not in ("rope_scaling",) and not (k == "rope_parameters" and per_type)}, where)

    @classmethod
    def config_from_hf(cls, data: Mapping[str, Any], architecture: str, where: str) -> ModelConfig:
        """Gemma 2's config, the RoPE of each layer type from ``rope_parameters`` (or ``rope_theta``,
        ``rope_local_base_freq`` and ``rope_scaling``); linear scaling of the global layers only."""
        data = dict(data)
        rope = data.get("rope_parameters")
        scaling = data.get("rope_scaling")
        if isinstance(rope, dict) and (SLIDING in rope or FULL in rope):
            full, sliding = rope.get(FULL) or {}, rope.get(SLIDING) or {}
            data["rope_theta"] = full.get("rope_theta", data.get("rope_theta", 1e6))
            data["rope_local_base_freq"] = sliding.get("rope_theta", data.get("rope_local_base_freq", 1e4))
            if sliding.get("rope_type", "default") != "default":
                raise UnsupportedModelError(f"{where} scales the RoPE of its local layers "
                                            f"({sliding.get('rope_type')!r}); pyagent's gemma3 does not")
            scaling = full if full.get("rope_type", "default") != "default" else None
        data.setdefault("rope_theta", 1e6)
        if scaling:
            kind = scaling.get("rope_type", scaling.get("type"))
            if kind != "linear":
                raise UnsupportedModelError(f"{where} asks for rope scaling {kind!r}; pyagent's gemma3 implements "
                                            "linear scaling of its global layers only")
            data["rope_scaling_factor"] = scaling.get("factor")
        return super().config_from_hf(data, architecture, where)

    @classmethod
    def hf_config(cls, config: ModelConfig) -> dict[str, Any]:
        """Gemma 2's, with the RoPE of both layer types as transformers writes them."""
        data = super().hf_config(config)
        factor = data.pop("rope_scaling_factor", 1.0)
        full = {"rope_type": "default", "rope_theta": data.pop("rope_theta")}
        if factor != 1.0:
            full = {**full, "rope_type": "linear", "factor": factor}
        data["rope_parameters"] = {FULL: full, SLIDING: {"rope_type": "default",
                                                         "rope_theta": data.pop("rope_local_base_freq")}}
        return data

    local_rope = True

    def __init__(self, options: Mapping[str, Any], context: ModelContext) -> None:
        super().__init__(options, context)
        self.local_cos, self.local_sin = self._angles(self.config.settings["rope_local_theta"], 1.0)

    def _rope_tables(self) -> tuple[torch.Tensor, torch.Tensor]:
        return self._angles(self.config.rope_theta, self.config.settings.get("rope_scaling_factor", 1.0))

    def _angles(self, theta: float, factor: float) -> tuple[torch.Tensor, torch.Tensor]:
        """``cos`` and ``sin`` tables of RoPE base ``theta``, positions divided by ``factor`` (linear scaling)."""
        cfg = self.config
        exponents = torch.arange(0, cfg.head_dim, 2, dtype=torch.int64).float() / cfg.head_dim
        inv_freq = 1.0 / (theta**exponents) / factor
        angles = torch.outer(torch.arange(cfg.max_position_embeddings).float(), inv_freq)
        angles = torch.cat((angles, angles), dim=-1)
        return angles.cos().to(self.dtype), angles.sin().to(self.dtype)

    def _run(self, plan: StepPlan, input_ids: torch.Tensor, positions: torch.Tensor, *args: Any) -> torch.Tensor:
        assert isinstance(plan, GemmaStepPlan)
        torch.index_select(self.local_cos, 0, positions, out=plan.local_cos)
        torch.index_select(self.local_sin, 0, positions, out=plan.local_sin)
        return super()._run(plan, input_ids, positions, *args)

