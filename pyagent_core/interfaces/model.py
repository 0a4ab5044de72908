"""Model interface: a decoder architecture, from its files to a forward over the paged KV cache.

A model plugin registers a :class:`~pyagent_core.types.ModelSpec` naming the architectures it serves:
the names a Hugging Face ``config.json`` lists under ``architectures`` (``"Qwen2ForCausalLM"``) and
the ``general.architecture`` of a GGUF file (``"qwen2"``). Its ``impl`` is a :class:`CausalLM`
subclass, which a host uses in two steps:

1. Before any weight is read, through class methods: :meth:`CausalLM.config_from_hf` and
   :meth:`CausalLM.config_from_gguf` read the hyper-parameters (a missing key is a
   :class:`~pyagent_core.errors.ModelFormatError` naming the file and the key);
   :meth:`CausalLM.weight_shapes` lists the weights the forward reads under their Hugging Face names;
   :meth:`CausalLM.gguf_tensor_names` maps a GGUF file's tensor names to those names and
   :meth:`CausalLM.gguf_permuted_heads` says which matrices llama.cpp's converter permuted;
   :meth:`CausalLM.attention_context` builds the :class:`AttentionContext` the attention backend
   is constructed with, so an architecture sets its attention scale and any per-layer attention
   settings the context carries; :meth:`CausalLM.cache_layout` says what each layer keeps between
   steps (paged keys and values, a paged latent, or a recurrent state per sequence:
   :mod:`pyagent_core.interfaces.cache`) and :meth:`CausalLM.mixer_families` which mixer families
   (:mod:`pyagent_core.interfaces.mixer`) its forward calls.
2. ``cls(options, context)`` with a :class:`ModelContext` (config, weights, dtype, device) builds
   the forward; :meth:`CausalLM.forward` runs a flat batch of new tokens over the caches the layout
   declares, calling ``attention.forward(q, k, v, kv_caches[layer], metadata, layer)`` for each
   attention layer and the mixer backend's families for the others, and returns float32 logits for
   the rows asked for.

A model may serve LoRA adapters (:mod:`pyagent_core.interfaces.lora`): :meth:`CausalLM.lora_targets`
names the weights an adapter may adapt, :meth:`CausalLM.read_lora` reads a PEFT folder or a
llama.cpp LoRA GGUF for the model, :meth:`CausalLM.enable_lora` sets up its slots,
:meth:`CausalLM.load_lora` and :meth:`CausalLM.unload_lora` fill and empty one, and the forward's
``lora_slots`` says which slot each token row uses. The defaults serve none (an architecture that
does not override them refuses adapters with :class:`~pyagent_core.errors.LoRAAdapterError`), and a
forward without ``lora_slots`` is the base model's.

Weights are keyed by Hugging Face parameter names whatever file they came from; a weight is a torch
tensor or a block-quantized matrix from a GGUF file (``pyagent_kernels.quantized.QuantizedWeight``).
"""

from __future__ import annotations

import json
import math
from abc import ABC, abstractmethod
from collections.abc import Collection, Mapping, Sequence
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, TypeVar

import attrs

from pyagent_core.errors import LoRAAdapterError, ModelFormatError
from pyagent_core.interfaces.attention import AttentionContext
from pyagent_core.interfaces.cache import CacheLayout, paged_layout

if TYPE_CHECKING:
    from pathlib import Path

    import torch

    from pyagent_core.interfaces.attention import AttentionBackend, AttentionMetadata
    from pyagent_core.interfaces.lora import LoRAAdapter, LoRASettings
    from pyagent_core.interfaces.mixer import MixerBackend

T = TypeVar("T", int, float, bool)

#: The precisions a model's products with block-quantized matrices can run in (:attr:`ModelContext.precision`).
PRECISIONS: tuple[str, ...] = ("exact", "int8")

_EXPECTED = {int: "an integer", float: "a finite number", bool: "true or false"}


def checked(value: Any, kind: type[T], key: str, where: str, *, positive: bool = False) -> T:
    """``value`` (the model file's ``key``) when it is a ``kind``; else :class:`ModelFormatError` naming
    ``where`` (the file), the key, what was expected and the value found. Integers stand for floats."""
    ok = isinstance(value, kind) and not (kind is int and isinstance(value, bool))
    if kind is float:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    if ok and positive:
        ok = value > 0
    if not ok:
        expected = ("a positive " + _EXPECTED[kind].removeprefix("an ").removeprefix("a ")) if positive \
            else _EXPECTED[kind]
        shown = json.dumps(value) if isinstance(value, (str, int, float, bool, type(None))) else repr(value)
        raise ModelFormatError(f"{where}: {key} must be {expected}, got {shown}")
    return kind(value)


def token_ids(value: Any, key: str, where: str) -> tuple[int, ...]:
    """The ids of ``value``: one token id, a list of them, or null (none); else :class:`ModelFormatError`."""
    values = value if isinstance(value, list) else [] if value is None else [value]
    return tuple(checked(v, int, key, where) for v in values)


class _Required:
    """The default of a :class:`ConfigKey` that must be present."""

    def __repr__(self) -> str:
        return "REQUIRED"


#: A :class:`ConfigKey` default meaning the key must be in the file.
REQUIRED: Any = _Required()


@attrs.frozen
class ConfigKey:
    """One hyper-parameter an architecture reads, with its names in both file formats.

    Attributes:
        field: where the value goes: a :class:`ModelConfig` field, or a key of its ``settings``.
        hf_key: its key in ``config.json``.
        gguf_key: its GGUF metadata key, ``{arch}`` standing for the file's ``general.architecture``
            (``"{arch}.block_count"``); ``None`` when GGUF files do not carry it (the default applies).
        kind: ``int``, ``float`` or ``bool``.
        default: the value when the key is absent or null: :data:`REQUIRED` (the key must be there),
            a value, or ``None`` (the field is left out, for the architecture to derive it).
        positive: the value must be greater than zero.
    """

    field: str
    hf_key: str
    gguf_key: str | None
    kind: type
    default: Any = REQUIRED
    positive: bool = False


#: The hyper-parameters every decoder has (``head_dim`` and ``num_kv_heads`` are left out when absent,
#: for the architecture to derive: usually ``hidden_size // num_heads`` and ``num_heads``).
COMMON_CONFIG_KEYS: tuple[ConfigKey, ...] = (
    ConfigKey("vocab_size", "vocab_size", "{arch}.vocab_size", int, positive=True),
    ConfigKey("hidden_size", "hidden_size", "{arch}.embedding_length", int, positive=True),
    ConfigKey("intermediate_size", "intermediate_size", "{arch}.feed_forward_length", int, positive=True),
    ConfigKey("num_layers", "num_hidden_layers", "{arch}.block_count", int, positive=True),
    ConfigKey("num_heads", "num_attention_heads", "{arch}.attention.head_count", int, positive=True),
    ConfigKey("num_kv_heads", "num_key_value_heads", "{arch}.attention.head_count_kv", int, None, positive=True),
    ConfigKey("head_dim", "head_dim", "{arch}.attention.key_length", int, None, positive=True),
    ConfigKey("rope_theta", "rope_theta", "{arch}.rope.freq_base", float, 10000.0, positive=True),
    ConfigKey("rms_norm_eps", "rms_norm_eps", "{arch}.attention.layer_norm_rms_epsilon", float, 1e-6),
    ConfigKey("max_position_embeddings", "max_position_embeddings", "{arch}.context_length", int, positive=True),
    ConfigKey("tie_word_embeddings", "tie_word_embeddings", None, bool, False),
)


def read_keys(values: Mapping[str, Any], keys: Sequence[ConfigKey], where: str, *,
              gguf_arch: str | None = None) -> dict[str, Any]:
    """``field -> value`` for ``keys`` found in ``values`` (a ``config.json`` object, or with
    ``gguf_arch`` a GGUF file's metadata); an absent key with a ``None`` default is left out.

    Raises :class:`ModelFormatError` naming ``where`` and the key when a required key is missing or a
    value has the wrong type.
    """
    found: dict[str, Any] = {}
    for key in keys:
        name = key.hf_key if gguf_arch is None else (key.gguf_key or "").format(arch=gguf_arch)
        value = values.get(name) if name else None
        if value is None:
            if key.default is REQUIRED:
                if name in values:  # present but null
                    checked(value, key.kind, name, where, positive=key.positive)
                raise ModelFormatError(f"{where} lacks the required key {name!r}")
            if key.default is None:
                continue
            value = key.default
        found[key.field] = checked(value, key.kind, name or key.hf_key, where, positive=key.positive)
    return found


@attrs.frozen
class ModelConfig:
    """Hyper-parameters of a decoder-only transformer.

    Attributes:
        architecture: the name of the model plugin that serves it (``"llama"``, ``"qwen3"``).
        vocab_size: rows of the embedding and of the output head.
        hidden_size: width of the residual stream.
        intermediate_size: width of the gated MLP.
        num_layers: number of decoder layers.
        num_heads: query heads per layer.
        num_kv_heads: key/value heads per layer (grouped-query attention when fewer than ``num_heads``).
        head_dim: size of each attention head.
        rope_theta: base of the rotary position embedding frequencies.
        rms_norm_eps: epsilon of every RMSNorm.
        max_position_embeddings: the context length the model was trained for.
        tie_word_embeddings: whether the output head reuses the embedding matrix.
        bos_token_id: beginning-of-sequence token, if the model has one.
        eos_token_ids: tokens that end generation (one or several).
        name: human-readable model name.
        settings: the architecture's own hyper-parameters (its extra :class:`ConfigKey` fields).
    """

    architecture: str
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rope_theta: float
    rms_norm_eps: float
    max_position_embeddings: int
    tie_word_embeddings: bool
    bos_token_id: int | None
    eos_token_ids: tuple[int, ...]
    name: str
    settings: Mapping[str, Any] = attrs.field(factory=dict, converter=lambda v: MappingProxyType(dict(v)))

    def __attrs_post_init__(self) -> None:
        for field in ("vocab_size", "hidden_size", "intermediate_size", "num_layers", "num_heads",
                      "num_kv_heads", "head_dim", "max_position_embeddings"):
            value = getattr(self, field)
            if not isinstance(value, int) or value <= 0:
                raise ModelFormatError(f"model config {self.name!r}: {field} must be a positive integer, got {value!r}")
        if self.num_heads % self.num_kv_heads:
            raise ModelFormatError(
                f"model config {self.name!r}: num_heads ({self.num_heads}) must be a multiple of "
                f"num_kv_heads ({self.num_kv_heads})"
            )
        for token in (self.bos_token_id, *self.eos_token_ids):
            if token is not None and not 0 <= token < self.vocab_size:
                raise ModelFormatError(
                    f"model config {self.name!r}: special token id {token} is outside the vocabulary "
                    f"(size {self.vocab_size})"
                )

    @property
    def attention_scale(self) -> float:
        """``head_dim ** -0.5``: the usual factor on ``q @ k.T``."""
        return float(self.head_dim**-0.5)


@attrs.frozen(eq=False)
class ModelContext:
    """What a model is built from.

    Attributes:
        config: the hyper-parameters, as the class's ``config_from_*`` read them.
        weights: Hugging Face parameter name -> torch tensor or ``QuantizedWeight``; every name of
            :meth:`CausalLM.weight_shapes` with that shape (the host checks, see :func:`check_weights`).
        dtype: name of the torch dtype of weights, activations and KV cache (``"float32"``, ``"bfloat16"``).
        device: where the weights live (``"cpu"``).
        quantized: keep block-quantized matrices in their blocks where the kernels can run them;
            false dequantizes them to ``dtype``.
        precision: how products with kept block-quantized matrices are computed: ``"exact"`` (the
            dequantized values' float product, bit-identical to the dense model: the reference) or
            ``"int8"`` (activations quantized to int8 blocks and multiplied in integers, as llama.cpp
            does: faster, within quantization noise of exact). Dense matrices ignore it.
    """

    config: ModelConfig
    weights: Mapping[str, Any]
    dtype: str = "float32"
    device: str = "cpu"
    quantized: bool = True
    precision: str = attrs.field(default="exact", validator=attrs.validators.in_(PRECISIONS))


def check_weights(config: ModelConfig, weights: Mapping[str, Any], shapes: Mapping[str, tuple[int, ...]]) -> None:
    """Raise :class:`ModelFormatError` naming missing weights or weights of the wrong shape."""
    missing = sorted(set(shapes) - set(weights))
    if missing:
        shown = ", ".join(missing[:5]) + (f" and {len(missing) - 5} more" if len(missing) > 5 else "")
        raise ModelFormatError(f"model {config.name!r} lacks {len(missing)} weights: {shown}")
    for name, shape in shapes.items():
        if tuple(weights[name].shape) != shape:
            raise ModelFormatError(
                f"model {config.name!r}: weight {name} has shape {list(weights[name].shape)}, "
                f"the config implies {list(shape)}"
            )


class CausalLM(ABC):
    """A decoder architecture: how its files are read, and its forward over the paged KV cache.

    Class methods describe the architecture before anything is built; ``cls(options, context)`` builds
    the forward on the context's weights (checked against :meth:`weight_shapes`).

    Args:
        options: the plugin's validated options (defaults filled in).
        context: config, weights, dtype and device, see :class:`ModelContext`.

    Attributes:
        config: ``context.config``.
    """

    def __init__(self, options: Mapping[str, Any], context: ModelContext) -> None:
        self.options = dict(options)
        self.context = context
        self.config = context.config

    @classmethod  # noqa: B027 - optional hook
    def check_available(cls) -> None:
        """Raise with a reason if this architecture cannot run here (deep check, ``--check``)."""

    @classmethod
    @abstractmethod
    def config_from_hf(cls, data: Mapping[str, Any], architecture: str, where: str) -> ModelConfig:
        """The config of a Hugging Face ``config.json`` object ``data`` read from ``where``.

        ``architecture`` is the serving plugin's name (:attr:`ModelConfig.architecture`). Raises
        :class:`ModelFormatError` naming ``where`` and the key for a missing or mistyped key, and
        :class:`~pyagent_core.errors.UnsupportedModelError` for a variant the forward lacks (a rope
        scaling it does not implement, say).
        """

    @classmethod
    @abstractmethod
    def config_from_gguf(cls, metadata: Mapping[str, Any], tensor_names: Collection[str], architecture: str,
                         where: str) -> ModelConfig:
        """The config a GGUF file's metadata describes (``tensor_names``: its tensors, which tell
        whether the output head is tied). Errors as :meth:`config_from_hf`, naming the metadata key."""

    @classmethod
    @abstractmethod
    def hf_config(cls, config: ModelConfig) -> dict[str, Any]:
        """``config`` as a ``config.json`` object that transformers and :meth:`config_from_hf` read back."""

    @classmethod
    @abstractmethod
    def weight_shapes(cls, config: ModelConfig) -> dict[str, tuple[int, ...]]:
        """Hugging Face parameter name -> shape, for every weight the forward reads."""

    @classmethod
    @abstractmethod
    def gguf_tensor_names(cls, config: ModelConfig) -> dict[str, str]:
        """GGUF tensor name -> Hugging Face parameter name, for every weight of :meth:`weight_shapes`
        (``"blk.0.attn_q.weight"`` -> ``"model.layers.0.self_attn.q_proj.weight"``)."""

    @classmethod
    def gguf_permuted_heads(cls, config: ModelConfig) -> dict[str, int]:
        """Hugging Face name -> head count, for the matrices whose rows llama.cpp's converter
        reordered per head for interleaved RoPE (Llama's ``q_proj``/``k_proj``); a reader restores
        Hugging Face's order. None by default."""
        return {}

    @classmethod
    def gguf_weight_offsets(cls, config: ModelConfig) -> dict[str, float]:
        """Hugging Face name -> the constant llama.cpp's converter added to that weight (Gemma's norms
        are stored as ``1 + w``); a reader subtracts it. None by default."""
        return {}

    @classmethod
    def gguf_restore(cls, config: ModelConfig, weights: dict[str, Any]) -> dict[str, Any]:
        """The weights of a GGUF file under Hugging Face names and layout, from ``weights``: the file's
        tensors renamed by :meth:`gguf_tensor_names` (rows restored, offsets subtracted).

        llama.cpp's converter stores some weights otherwise than Hugging Face does: transformed
        (Mamba's ``A_log`` as ``-exp(A_log)``), reshaped (a convolution's squeezed kernel), split (a
        fused projection as two tensors) or stacked (a layer's experts as one 3-D tensor). An
        architecture names such tensors in :meth:`gguf_tensor_names` by their GGUF name and turns them
        into its Hugging Face weights here. The default returns ``weights`` unchanged.
        """
        return weights

    @classmethod
    def cache_layout(cls, config: ModelConfig) -> CacheLayout:
        """What each layer keeps between steps (:mod:`pyagent_core.interfaces.cache`), in layer order.

        The default: paged keys and values on every layer (``num_kv_heads``, ``head_dim``), each with
        its sliding window from :meth:`attention_context`.
        """
        context = cls.attention_context(config, 1, "float32")
        return paged_layout(config.num_layers, config.num_kv_heads, config.head_dim,
                            [context.window(i) for i in range(config.num_layers)])

    @classmethod
    def mixer_families(cls, config: ModelConfig) -> tuple[str, ...]:
        """The mixer families (:data:`~pyagent_core.interfaces.mixer.MIXER_FAMILIES`) :meth:`forward`
        calls; the host passes a mixer backend implementing all of them. None by default."""
        return ()

    @classmethod
    def attention_context(cls, config: ModelConfig, block_size: int, dtype: str) -> AttentionContext:
        """The :class:`AttentionContext` the attention backend is built with for this model: its
        heads, scale (``head_dim ** -0.5`` by default) and any per-layer attention settings."""
        return AttentionContext(num_heads=config.num_heads, head_size=config.head_dim,
                                num_kv_heads=config.num_kv_heads, scale=config.attention_scale,
                                block_size=block_size, dtype=dtype)

    # --- LoRA adapters (optional: the defaults serve none) --------------------------------------------

    @classmethod
    def lora_targets(cls, config: ModelConfig) -> dict[str, tuple[int, int]]:
        """Hugging Face name -> ``(out_features, in_features)`` of every weight a LoRA adapter may
        adapt (``model.layers.0.self_attn.q_proj.weight``); empty (the default) when the
        architecture serves no adapters."""
        return {}

    @classmethod
    def read_lora(cls, path: str | Path, config: ModelConfig, name: str | None = None) -> LoRAAdapter:
        """Read the LoRA adapter at ``path`` (a PEFT folder or a llama.cpp LoRA GGUF file) for a model of
        ``config``, checked against :meth:`lora_targets`; ``name`` defaults to the folder or file name.

        Raises :class:`~pyagent_core.errors.LoRAAdapterError` naming the file, the tensor or key and
        what to do, for a malformed adapter, one made for another base model (hidden size, layer
        count, shapes), a target this architecture does not adapt, or an unsupported option. The
        default serves no adapters and always raises.
        """
        raise LoRAAdapterError(f"the {config.architecture} architecture does not serve LoRA adapters; "
                               f"{path} cannot be used with it")

    def enable_lora(self, settings: LoRASettings) -> None:
        """Make room for ``settings.max_loras`` adapters of rank up to ``settings.max_lora_rank``, all
        slots empty (adapters loaded before are dropped). Raises
        :class:`~pyagent_core.errors.LoRAAdapterError` by default (no adapters served)."""
        raise LoRAAdapterError(f"the {self.config.architecture} architecture does not serve LoRA adapters")

    def load_lora(self, slot: int, adapter: LoRAAdapter) -> None:
        """Put ``adapter`` (read by :meth:`read_lora` for this model's config) into ``slot``, replacing
        what was there; rows of that slot use it from the next forward on. Raises
        :class:`~pyagent_core.errors.LoRAAdapterError` when LoRA is not enabled, the slot is out of
        range, or the adapter's rank exceeds ``max_lora_rank`` or does not fit this model."""
        raise LoRAAdapterError(f"the {self.config.architecture} architecture does not serve LoRA adapters")

    def unload_lora(self, slot: int) -> None:
        """Empty ``slot``; a forward whose rows name it then raises. Raises
        :class:`~pyagent_core.errors.LoRAAdapterError` when LoRA is not enabled or the slot is out of range."""
        raise LoRAAdapterError(f"the {self.config.architecture} architecture does not serve LoRA adapters")

    @abstractmethod
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
        """Run the new tokens of a batch through the model; return float32 logits of chosen rows.

        Args:
            input_ids: ``int64 [num_tokens]``, the new tokens of every sequence, concatenated.
            positions: ``int64 [num_tokens]``, each token's position in its sequence
                (``< config.max_position_embeddings``).
            kv_caches: one cache per layer as :meth:`cache_layout` declares it
                (:meth:`~pyagent_core.interfaces.cache.LayerCache.allocate`): a paged tensor
                ``[2, num_blocks, block_size, num_kv_heads, head_dim]`` for attention layers (every
                layer of an attention-only model), a latent tensor for MLA layers, a tuple of float32
                state tensors ``[num_slots, ...]`` for recurrent layers.
            metadata: where the tokens sit in the caches (shared by all layers); with recurrent
                layers its ``state_slots`` gives each sequence's state slot.
            attention: the backend, built with :meth:`attention_context`; the forward calls
                ``attention.forward(q, k, v, kv_caches[layer], metadata, layer)`` once per attention
                layer, which writes the layer's new keys and values.
            logits_indices: ``int64 [n]``, the rows of the batch to compute logits for.
            threads: threads for the forward's kernels (default: torch's intra-op thread count).
            lora_slots: ``int32`` or ``int64 [num_tokens]``, the LoRA slot (:meth:`load_lora`) each
                token row uses, -1 for the base model; ``None`` (the default) is all -1. A model that
                serves no adapters accepts ``None`` and all -1 only; naming an empty slot or one
                outside ``max_loras`` raises :class:`~pyagent_core.errors.LoRAAdapterError`.
            mixer: the mixer backend, passed (by keyword) only to a model whose
                :meth:`mixer_families` is not empty, implementing them all.

        Returns:
            ``float32 [n, vocab_size]`` logits. A sequence's rows must not depend on the other
            sequences of the batch (nor on their adapters) beyond float rounding.
        """
