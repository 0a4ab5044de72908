"""The decoder of hybrid architectures: layers that mix with attention, a recurrent mixer or latent attention.

:class:`HybridLM` is a :class:`~pyagent_core.interfaces.model.CausalLM` whose family declares one
table of :class:`~pyagent_core.interfaces.model.ConfigKey` s (every hyper-parameter it reads, from
``config.json`` and from GGUF metadata alike) and builds its layers as :class:`Block` s: a pre-norm
residual block around a *mix* (attention through the host's attention backend, or a mixer family
through its mixer backend) and an optional feed-forward (dense or mixture of experts). The forward
embeds the tokens, runs the blocks over the caches the family's :meth:`~HybridLM.cache_layout`
declares, normalizes the rows asked for and projects them to float32 logits.

The steps between the products are torch operations on the batch's rows; every product is
:func:`pyagent_kernels.linear.linear` (row bits independent of the batch), so a sequence's logits do
not depend on the sequences it is batched with beyond what its mixers guarantee.

The hybrid families serve no LoRA adapters (the interface's defaults: no ``lora_targets``, adapters
refused with :class:`~pyagent_core.errors.LoRAAdapterError`); their forward takes ``lora_slots`` of
``None`` or all -1 only. Adapting their mixers' projections is issue 30's phase 2.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any, ClassVar

import attrs
import gguf
import torch

from pyagent_core.errors import LoRAAdapterError, ModelFormatError, UnsupportedModelError
from pyagent_core.interfaces.attention import AttentionBackend, AttentionMetadata
from pyagent_core.interfaces.mixer import MixerBackend
from pyagent_core.interfaces.model import (
    COMMON_CONFIG_KEYS,
    CausalLM,
    ConfigKey,
    ModelConfig,
    ModelContext,
    check_weights,
    checked,
    read_keys,
    token_ids,
)
from pyagent_kernels.quantized import QuantizedWeight, shared_format
from pyagent_model_base.layers import Weight, dense, rms_norm

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}
_FIELDS = {field.name for field in attrs.fields(ModelConfig)} - {"architecture", "settings"}


_COMMON_KEYS = {key.field: key for key in COMMON_CONFIG_KEYS}


def common_keys(*fields: str, **defaults: Any) -> tuple[ConfigKey, ...]:
    """The core's :data:`~pyagent_core.interfaces.model.COMMON_CONFIG_KEYS` of ``fields``, in that order,
    with ``defaults`` (field -> value) instead of theirs."""
    return tuple(attrs.evolve(_COMMON_KEYS[f], default=defaults[f]) if f in defaults else _COMMON_KEYS[f]
                 for f in fields)


#: transformers' legacy layer-type names and the ones it maps them to (``configuration_utils``).
LEGACY_LAYER_TYPES = {"mamba": "linear_attention", "attention": "full_attention"}


def read_layer_types(value: Any, num_layers: int, allowed: Collection[str], where: str) -> tuple[str, ...]:
    """``config.json``'s ``layer_types``: one of ``allowed`` per layer (legacy names mapped as
    transformers maps them); :class:`ModelFormatError` naming ``where`` otherwise."""
    types = [LEGACY_LAYER_TYPES.get(t, t) for t in value] if isinstance(value, list) else None
    if types is None or len(types) != num_layers or any(t not in allowed for t in types):
        raise ModelFormatError(f"{where}: layer_types must list {num_layers} entries of {sorted(allowed)}, "
                               f"got {value!r}")
    return tuple(types)


class WeightReader:
    """The context's weights laid out for the forward: matrices kept in their GGUF blocks where the
    kernels can run them (CPU, ``quantized``), everything else dense in the working dtype."""

    def __init__(self, context: ModelContext, dtype: torch.dtype) -> None:
        self.weights = context.weights
        self.dtype = dtype
        self.device = torch.device(context.device)
        self.keep_quantized = context.quantized and self.device.type == "cpu"

    def has(self, name: str) -> bool:
        """Whether the checkpoint holds ``name``."""
        return name in self.weights

    def tensor(self, *names: str) -> torch.Tensor:
        """The named weights, dequantized, stacked along their first dimension, in the working dtype."""
        parts = [self.weights[name] for name in names]
        values = [part.dequantize() if isinstance(part, QuantizedWeight) else part for part in parts]
        stacked = values[0] if len(values) == 1 else torch.cat(values)
        return stacked.to(device=self.device, dtype=self.dtype).contiguous()

    def optional(self, name: str) -> torch.Tensor | None:
        """:meth:`tensor` of ``name``, or ``None`` when the checkpoint lacks it."""
        return self.tensor(name) if self.has(name) else None

    def matrix(self, *names: str) -> Weight:
        """The named matrices stacked as one product's weight: quantized when every part is, in formats
        one layout holds; dense otherwise."""
        parts = [self.weights[name] for name in names]
        quantized = [part for part in parts if isinstance(part, QuantizedWeight)]
        if self.keep_quantized and len(quantized) == len(parts) and shared_format(quantized) is not None:
            return quantized[0] if len(quantized) == 1 else QuantizedWeight.cat(quantized)
        return self.tensor(*names)


@attrs.frozen(eq=False)
class Step:
    """What every block of one forward reads: the batch and the host's backends.

    Attributes:
        positions: ``int64 [num_tokens]``.
        metadata: the batch layout (with ``state_slots`` for recurrent layers).
        caches: the layers' caches, as the cache layout declares them.
        attention: the attention backend (for attention layers).
        mixer: the mixer backend (for the others), or ``None``.
        threads: threads for the kernels.
    """

    positions: torch.Tensor
    metadata: AttentionMetadata
    caches: Sequence[Any]
    attention: AttentionBackend
    mixer: MixerBackend | None
    threads: int


#: A block's mix: ``(normed hidden [tokens, hidden], step, layer) -> output [tokens, hidden]``.
Mix = Callable[[torch.Tensor, Step, int], torch.Tensor]
#: A block's feed-forward: ``(normed hidden, threads) -> output``.
FeedForward = Callable[[torch.Tensor, int], torch.Tensor]


@attrs.frozen(eq=False)
class Block:
    """A pre-norm residual layer: ``h += r * mix(norm(h))``, then ``h += r * ffn(norm(h))`` when it has one.

    Attributes:
        input_norm: the RMSNorm weight before the mix.
        mix: attention or a mixer (:data:`Mix`).
        post_norm: the RMSNorm weight before the feed-forward (``None`` without one).
        ffn: the feed-forward (:data:`FeedForward`), or ``None``.
        residual_scale: ``r``, the factor on both branches (Granite's ``residual_multiplier``).
    """

    input_norm: torch.Tensor
    mix: Mix
    post_norm: torch.Tensor | None = None
    ffn: FeedForward | None = None
    residual_scale: float = 1.0

    def forward(self, hidden: torch.Tensor, step: Step, layer: int, eps: float) -> torch.Tensor:
        """The layer's output for ``hidden [tokens, hidden]``."""
        mixed = self.mix(rms_norm(hidden, self.input_norm, eps), step, layer)
        hidden = hidden + (mixed if self.residual_scale == 1.0 else mixed * self.residual_scale)
        if self.ffn is None or self.post_norm is None:
            return hidden
        fed = self.ffn(rms_norm(hidden, self.post_norm, eps), step.threads)
        return hidden + (fed if self.residual_scale == 1.0 else fed * self.residual_scale)


class HybridLM(CausalLM):
    """A family of hybrid decoders, declared by its class attributes and its :meth:`build_blocks`.

    Class attributes a family sets:
        hf_architecture, model_type: what :meth:`hf_config` writes.
        gguf_arch: the ``gguf.MODEL_ARCH`` whose tensor-name map names its GGUF tensors.
        config_keys: every hyper-parameter it reads (fields of :class:`ModelConfig` and its own, into
            ``settings``), in both formats.
        embedding_name, final_norm_name: the Hugging Face names of the embedding and the final norm.

    Args:
        options: none are defined.
        context: as :class:`CausalLM`; weights are checked against :meth:`weight_shapes`.
    """

    hf_architecture: ClassVar[str]
    model_type: ClassVar[str]
    gguf_arch: ClassVar[gguf.MODEL_ARCH]
    config_keys: ClassVar[tuple[ConfigKey, ...]]
    embedding_name: ClassVar[str] = "model.embed_tokens.weight"
    final_norm_name: ClassVar[str] = "model.norm.weight"

    # --- the files ---------------------------------------------------------------------------------

    @classmethod
    def check_hf_variant(cls, data: Mapping[str, Any], where: str) -> None:
        """Raise :class:`~pyagent_core.errors.UnsupportedModelError` for a variant the forward lacks: rope
        scaling (``rope_parameters``/``rope_scaling`` of another type than ``default``), biases on the
        attention projections, another activation than SiLU. A family adds its own refusals."""
        rope = data.get("rope_parameters") or data.get("rope_scaling") or {}
        kind = rope.get("rope_type", rope.get("type", "default")) if isinstance(rope, dict) else "default"
        if kind != "default":
            raise UnsupportedModelError(f"{where} asks for rope scaling {kind!r}; pyagent's {cls.model_type} "
                                        "implements plain RoPE only")
        if data.get("attention_bias"):
            raise UnsupportedModelError(f"{where} sets attention_bias: true; pyagent's {cls.model_type} has no "
                                        "attention biases")
        if data.get("hidden_act", "silu") != "silu":
            raise UnsupportedModelError(f"{where} uses hidden_act {data['hidden_act']!r}; pyagent's "
                                        f"{cls.model_type} runs silu")

    @classmethod
    def hf_values(cls, data: Mapping[str, Any], where: str) -> dict[str, Any]:
        """``config.json``'s values as :attr:`config_keys` name them: ``rope_theta`` and
        ``partial_rotary_factor`` out of ``rope_parameters`` (a family moves its own nested or legacy keys)."""
        values = dict(data)
        rope = data.get("rope_parameters")
        if isinstance(rope, dict):
            values.update({k: rope[k] for k in ("rope_theta", "partial_rotary_factor") if k in rope})
        return values

    @classmethod
    def gguf_values(cls, metadata: Mapping[str, Any], tensor_names: Collection[str], arch: str) -> dict[str, Any]:
        """The GGUF metadata as :attr:`config_keys` name them (a family derives what files leave out)."""
        return dict(metadata)

    @classmethod
    def hf_settings(cls, data: Mapping[str, Any], num_layers: int, where: str) -> dict[str, Any]:
        """Settings no :class:`ConfigKey` reads from ``config.json`` (a list per layer, say); none by default."""
        return {}

    @classmethod
    def gguf_settings(cls, metadata: Mapping[str, Any], tensor_names: Collection[str], num_layers: int,
                      where: str) -> dict[str, Any]:
        """The same settings from a GGUF file; none by default."""
        return {}

    @classmethod
    def hf_extra(cls, config: ModelConfig) -> dict[str, Any]:
        """What :meth:`hf_config` writes beyond :attr:`config_keys` (those settings, constants); none by default."""
        return {}

    @classmethod
    def derive(cls, values: dict[str, Any]) -> dict[str, Any]:
        """Fill the :class:`ModelConfig` fields the family's files leave out, from the others."""
        values.setdefault("num_kv_heads", values["num_heads"])
        values.setdefault("head_dim", values["hidden_size"] // values["num_heads"])
        return values

    @classmethod
    def _build_config(cls, values: dict[str, Any], architecture: str, **rest: Any) -> ModelConfig:
        values = cls.derive(values)
        fields = {k: v for k, v in values.items() if k in _FIELDS}
        settings = {k: v for k, v in values.items() if k not in _FIELDS}
        return ModelConfig(architecture=architecture, settings=settings, **fields, **rest)

    @classmethod
    def config_from_hf(cls, data: Mapping[str, Any], architecture: str, where: str) -> ModelConfig:
        """The config of a ``config.json`` object; see :meth:`CausalLM.config_from_hf`."""
        cls.check_hf_variant(data, where)
        values = read_keys(cls.hf_values(data, where), cls.config_keys, where)
        values |= cls.hf_settings(data, values["num_layers"], where)
        bos = data.get("bos_token_id")
        return cls._build_config(values, architecture,
                                 bos_token_id=None if bos is None else checked(bos, int, "bos_token_id", where),
                                 eos_token_ids=token_ids(data.get("eos_token_id"), "eos_token_id", where),
                                 name=str(data.get("_name_or_path") or where))

    @classmethod
    def config_from_gguf(cls, metadata: Mapping[str, Any], tensor_names: Collection[str], architecture: str,
                         where: str) -> ModelConfig:
        """The config of a GGUF file's metadata; see :meth:`CausalLM.config_from_gguf`. The vocabulary
        size defaults to the number of ``tokenizer.ggml.tokens``; the head is tied when the file has
        no ``output.weight``."""
        arch = str(metadata.get("general.architecture"))
        tokens = metadata.get("tokenizer.ggml.tokens") or ()
        values = cls.gguf_values({f"{arch}.vocab_size": len(tokens) or None, **metadata}, tensor_names, arch)
        found = read_keys(values, cls.config_keys, where, gguf_arch=arch)
        found["tie_word_embeddings"] = "output.weight" not in tensor_names
        found |= cls.gguf_settings(metadata, tensor_names, found["num_layers"], where)
        eos = [metadata.get(f"tokenizer.ggml.{name}_token_id") for name in ("eos", "eot", "eom")]
        bos = metadata.get("tokenizer.ggml.bos_token_id")
        eos_ids = token_ids([e for e in eos if e is not None], "tokenizer.ggml.eos_token_id", where)
        return cls._build_config(found, architecture,
                                 bos_token_id=None if bos is None else checked(bos, int, "tokenizer.ggml.bos_token_id",
                                                                               where),
                                 eos_token_ids=tuple(dict.fromkeys(eos_ids)),
                                 name=str(metadata.get("general.name") or where))

    @classmethod
    def hf_config(cls, config: ModelConfig) -> dict[str, Any]:
        """``config`` as a ``config.json`` object: every key of :attr:`config_keys` the config holds."""
        data: dict[str, Any] = {"architectures": [cls.hf_architecture], "model_type": cls.model_type,
                                "_name_or_path": config.name}
        for key in cls.config_keys:
            value = getattr(config, key.field) if key.field in _FIELDS else config.settings.get(key.field)
            if value is not None:
                data[key.hf_key] = list(value) if isinstance(value, tuple) else value
        return {**data, **cls.hf_extra(config), "bos_token_id": config.bos_token_id,
                "eos_token_id": list(config.eos_token_ids), "torch_dtype": "float32"}

    @classmethod
    def mapped_gguf_names(cls, config: ModelConfig, skip: Collection[str] = ()) -> dict[str, str]:
        """GGUF name -> Hugging Face name through the ``gguf`` package's map of :attr:`gguf_arch`, for every
        weight of :meth:`weight_shapes` but ``skip`` (the ones :meth:`gguf_restore` builds)."""
        tensor_map = gguf.get_tensor_name_map(cls.gguf_arch, config.num_layers)
        names = {}
        for hf_name in cls.weight_shapes(config):
            if hf_name in skip:
                continue
            base, _, suffix = hf_name.rpartition(".")
            mapped = tensor_map.get_name(base) if suffix in ("weight", "bias") else tensor_map.get_name(hf_name)
            if mapped is None:
                raise ValueError(f"{cls.__name__}: the gguf package maps no {gguf.MODEL_ARCH_NAMES[cls.gguf_arch]} "
                                 f"tensor to {hf_name}")
            names[f"{mapped}.{suffix}" if suffix in ("weight", "bias") else mapped] = hf_name
        return names

    @classmethod
    def outer_shapes(cls, config: ModelConfig) -> dict[str, tuple[int, ...]]:
        """The shapes of the weights around the layers, for a family's :meth:`weight_shapes`: the
        embedding, the final norm and, unless tied to the embedding, the output head."""
        head = (config.vocab_size, config.hidden_size)
        shapes: dict[str, tuple[int, ...]] = {cls.embedding_name: head, cls.final_norm_name: (config.hidden_size,)}
        if not config.tie_word_embeddings:
            shapes["lm_head.weight"] = head
        return shapes

    @classmethod
    def gguf_tensor_names(cls, config: ModelConfig) -> dict[str, str]:
        """Every weight's GGUF name (:meth:`mapped_gguf_names`); a family whose converter transforms some
        adds their GGUF names (mapped to themselves) and restores them in :meth:`gguf_restore`."""
        return cls.mapped_gguf_names(config)

    # --- the forward -------------------------------------------------------------------------------

    def __init__(self, options: Mapping[str, Any], context: ModelContext) -> None:
        # The hybrid families multiply GGUF blocks exactly (their dequantized values' bits) at any
        # requested precision: the int8 products are DecoderLM's; the context says what runs.
        context = attrs.evolve(context, precision="exact")
        super().__init__(options, context)
        check_weights(self.config, context.weights, self.weight_shapes(self.config))
        if context.dtype not in DTYPES:
            raise ValueError(f"model dtype {context.dtype!r} is not supported; choose one of: {', '.join(DTYPES)}")
        self.dtype = DTYPES[context.dtype]
        reader = WeightReader(context, self.dtype)
        self.embed_tokens = reader.matrix(self.embedding_name)
        self.final_norm = reader.tensor(self.final_norm_name)
        self.lm_head = self.embed_tokens if self.config.tie_word_embeddings else reader.matrix("lm_head.weight")
        self.blocks = self.build_blocks(reader)
        self.families = self.mixer_families(self.config)

    def build_blocks(self, reader: WeightReader) -> list[Block]:
        """The family's layers, from the checkpoint's weights."""
        raise NotImplementedError

    def embed(self, input_ids: torch.Tensor) -> torch.Tensor:
        """The tokens' embeddings (a family scales them here)."""
        if isinstance(self.embed_tokens, QuantizedWeight):
            return self.embed_tokens.rows(input_ids, self.dtype)
        return self.embed_tokens[input_ids]

    def logits(self, rows: torch.Tensor, threads: int) -> torch.Tensor:
        """float32 logits of the final hidden ``rows`` (a family scales them here)."""
        from pyagent_kernels.linear import linear

        normed = rms_norm(rows, self.final_norm, self.config.rms_norm_eps)
        return linear(normed.contiguous(), self.lm_head, out_dtype=torch.float32, threads=threads, precision="exact")

    def forward(
        self,
        input_ids: torch.Tensor,
        positions: torch.Tensor,
        kv_caches: Sequence[torch.Tensor | tuple[torch.Tensor, ...]],
        metadata: AttentionMetadata,
        attention: AttentionBackend,
        logits_indices: torch.Tensor,
        threads: int | None = None,
        lora_slots: torch.Tensor | None = None,
        mixer: MixerBackend | None = None,
    ) -> torch.Tensor:
        """See :meth:`CausalLM.forward`; ``lora_slots`` must be ``None`` or all -1 (no adapters served)."""
        tokens = input_ids.shape[0]
        if input_ids.dim() != 1 or positions.shape != (tokens,):
            raise ValueError(f"input_ids and positions must both be [num_tokens]; got {list(input_ids.shape)} and "
                             f"{list(positions.shape)}")
        if lora_slots is not None:
            named = sorted(set(lora_slots.flatten().tolist()) - {-1})
            if named or lora_slots.shape != (tokens,):
                raise LoRAAdapterError(f"lora_slots of shape {list(lora_slots.shape)} names slots {named[:8]}, but "
                                       f"the {self.config.architecture} architecture serves no LoRA adapters; pass "
                                       f"None (or {tokens} times -1) for the base model")
        if len(kv_caches) != self.config.num_layers:
            raise ValueError(f"kv_caches holds {len(kv_caches)} caches for a model of {self.config.num_layers} layers; "
                             "allocate them with cache_layout(config).allocate(...)")
        if self.families and mixer is None:
            raise ValueError(f"model {self.config.name!r} needs a mixer backend with the families {self.families} "
                             "(forward(..., mixer=backend))")
        step = Step(positions, metadata, kv_caches, attention, mixer, threads or torch.get_num_threads())
        hidden = self.embed(input_ids)
        eps = self.config.rms_norm_eps
        for index, block in enumerate(self.blocks):
            hidden = block.forward(hidden, step, index, eps)
        return self.logits(hidden[logits_indices], step.threads)


def attention_mix(qkv: Weight, o_proj: Weight, heads: int, kv_heads: int, head_dim: int, *,
                  q_norm: torch.Tensor | None = None, k_norm: torch.Tensor | None = None, eps: float = 1e-6,
                  rope: Any = None, gated: bool = False) -> Mix:
    """An attention layer's mix: q/k/v projection (``qkv`` stacked; with ``gated`` each query head is
    followed by its gate head, Qwen3-Next), per-head q/k RMSNorm, RoPE (a :class:`~pyagent_model_base.
    layers.Rope` or ``None``: no positions), the host's attention backend over the layer's paged cache,
    the output gated by ``sigmoid(gate)``, and the output projection."""
    q_width = heads * head_dim * (2 if gated else 1)

    def mix(x: torch.Tensor, step: Step, layer: int) -> torch.Tensor:
        tokens = x.shape[0]
        projected = dense(x, qkv, step.threads)
        q, k, v = projected.split((q_width, kv_heads * head_dim, kv_heads * head_dim), dim=-1)
        gate = None
        if gated:
            pairs = q.reshape(tokens, heads, 2 * head_dim)
            q, gate = pairs[..., :head_dim], pairs[..., head_dim:].reshape(tokens, heads * head_dim)
        q, k = q.reshape(tokens, heads, head_dim), k.reshape(tokens, kv_heads, head_dim)
        if q_norm is not None and k_norm is not None:
            q, k = rms_norm(q, q_norm, eps), rms_norm(k, k_norm, eps)
        if rope is not None:
            q, k = rope.apply(q, step.positions), rope.apply(k, step.positions)
        out = step.attention.forward(q.contiguous(), k.contiguous(), v.reshape(tokens, kv_heads, head_dim).contiguous(),
                                     step.caches[layer], step.metadata, layer).reshape(tokens, heads * head_dim)
        if gate is not None:
            out = out * torch.sigmoid(gate)
        return dense(out, o_proj, step.threads)

    return mix


def swiglu_ffn(gate_up: Weight, down: Weight) -> FeedForward:
    """A dense SwiGLU feed-forward."""
    from pyagent_model_base.layers import swiglu

    return lambda x, threads: swiglu(x, gate_up, down, threads)
