"""The decoder every declared family is: :class:`DecoderLM`, a :class:`~pyagent_core.interfaces.model.CausalLM`.

A family subclasses it with a few class attributes (its ``config.json`` names, its GGUF architecture,
its :class:`~pyagent_model_base.layout.DecoderLayout` and any extra config keys); the class methods
read its files and name its weights from those, and the forward runs its layers.

The forward, per layer: RMSNorm, one fused q/k/v projection (plus bias, plus per-head q/k RMSNorm,
as the layout says), rotate-half RoPE at each token's position, attention through the
:class:`~pyagent_core.interfaces.attention.AttentionBackend` (which also writes the new keys and values
into the layer's cache), output projection and residual; RMSNorm, a fused gate/up projection, SwiGLU,
down projection and residual. A final RMSNorm and the output head (tied to the embedding when the
model says so) give float32 logits for the requested rows only. Every matrix product is
:mod:`pyagent_kernels.linear`'s kernel, whose rows do not depend on the other rows of the batch, so a
sequence's tokens do not depend on its batch; the norms, RoPE and SwiGLU between them are one call
each (:mod:`pyagent_kernels.layer_ops`). A weight may be a
:class:`~pyagent_kernels.quantized.QuantizedWeight` (a GGUF file's blocks, decoded by the kernel into
the values the dequantized matrix holds), which gives the same bits from fewer bytes.

The batch is flat: ``num_tokens`` new tokens of any number of sequences, placed by the attention
metadata, so prefill, chunked prefill and decode steps are the same call. A step runs on activation
buffers allocated once for it, with every kernel call between two attention calls checked once and
then run as it is (:class:`pyagent_kernels.program.Program`: the calls between two attention calls
are one call into C); small steps (decode, draft verification) keep theirs for the next step of the
same size, so a decode step spends its time in the kernels.

LoRA adapters (:mod:`pyagent_model_base.lora`): every q/k/v, o, gate/up and down projection may be
adapted; :meth:`DecoderLM.enable_lora` sets up the slots, and a step whose ``lora_slots`` name any
runs the same plan with a batched LoRA call after each adapted product. A step without adapters runs
the base plan, untouched.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

import attrs
import gguf
import torch

from pyagent_core.errors import LoRAAdapterError, ModelFormatError, UnsupportedModelError
from pyagent_core.interfaces.attention import AttentionBackend, AttentionMetadata
from pyagent_core.interfaces.lora import LoRAAdapter, LoRASettings
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
from pyagent_kernels import run_prepared
from pyagent_kernels.linear import Precision, linear
from pyagent_kernels.quantized import QuantizedWeight, shared_format
from pyagent_model_base.layout import DecoderLayout
from pyagent_model_base.lora.reading import read_adapter
from pyagent_model_base.lora.slots import LoRASlots
from pyagent_model_base.lora.targets import decoder_targets
from pyagent_model_base.step_plan import REUSED_STEP_TOKENS, LayerWeights, StepPlan, Workspace

#: A dense tensor, or a matrix kept in a GGUF block format.
Weight = torch.Tensor | QuantizedWeight

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


def layer_prefix(index: int) -> str:
    """The Hugging Face name prefix of decoder layer ``index``."""
    return f"model.layers.{index}."


class DecoderLM(CausalLM):
    """A pre-norm decoder with RoPE, grouped-query attention and a SwiGLU MLP, as its family declares it.

    Class attributes a family sets:
        hf_architecture: the ``config.json`` ``architectures`` name :meth:`hf_config` writes.
        model_type: the ``config.json`` ``model_type`` it writes.
        gguf_arch: the ``gguf.MODEL_ARCH`` whose tensor-name map names its GGUF tensors.
        layout: its :class:`DecoderLayout`.
        config_keys: hyper-parameters beyond :data:`~pyagent_core.interfaces.model.COMMON_CONFIG_KEYS`,
            read into :attr:`ModelConfig.settings`.
        gguf_permutes_qk: llama.cpp's converter reordered its q/k rows for interleaved RoPE (its
            ``llama`` architecture does; the others keep Hugging Face's order).

    Args:
        options: none are defined.
        context: the config, the weights (Hugging Face name -> tensor, any float dtype, converted; or
            :class:`QuantizedWeight`, kept as it is when ``context.quantized`` and the device is the
            CPU, or dequantized; a quantized part fused with a dense one is dequantized), the working
            dtype (``"float32"`` or ``"bfloat16"``) and the device. The weights are checked against
            :meth:`weight_shapes` (:class:`ModelFormatError` naming a missing or misshapen weight).

    The kernel calls of :meth:`forward` hold the weights' memory: change a weight in place
    (``copy_``) or replace a layer's :class:`LayerWeights` in :attr:`layers`, never a tensor's
    storage (``.data =``, ``resize_``, ``set_``).
    """

    hf_architecture: ClassVar[str]
    model_type: ClassVar[str]
    gguf_arch: ClassVar[gguf.MODEL_ARCH]
    layout: ClassVar[DecoderLayout] = DecoderLayout()
    config_keys: ClassVar[tuple[ConfigKey, ...]] = ()
    gguf_permutes_qk: ClassVar[bool] = False

    # --- reading the files ---------------------------------------------------------------------

    @classmethod
    def check_hf_variant(cls, data: Mapping[str, Any], where: str) -> None:
        """Raise :class:`UnsupportedModelError` for a ``config.json`` variant the forward lacks.

        The base refuses rope scaling (a ``rope_type`` other than ``default``) and partial RoPE; a
        family adds its own refusals.
        """
        rope = data.get("rope_parameters") or data.get("rope_scaling") or {}
        if not isinstance(rope, dict):
            raise ModelFormatError(f"{where}: rope_scaling must be an object or null, got {json.dumps(rope)}")
        rope_type = rope.get("rope_type", rope.get("type", "default"))
        if rope_type != "default":
            raise UnsupportedModelError(f"{where} asks for rope scaling {rope_type!r}; pyagent implements plain RoPE "
                                        "only")
        partial = rope.get("partial_rotary_factor", data.get("partial_rotary_factor", 1.0))
        if partial != 1.0:
            raise UnsupportedModelError(f"{where} rotates only part of each head (partial_rotary_factor "
                                        f"{partial}), which pyagent lacks")

    @classmethod
    def config_from_hf(cls, data: Mapping[str, Any], architecture: str, where: str) -> ModelConfig:
        """The config of a ``config.json`` object; see :meth:`CausalLM.config_from_hf`."""
        cls.check_hf_variant(data, where)
        rope = data.get("rope_parameters")
        if isinstance(rope, dict) and "rope_theta" in rope:
            data = {**data, "rope_theta": rope["rope_theta"]}
        values = read_keys(data, COMMON_CONFIG_KEYS, where)
        bos = data.get("bos_token_id")
        return cls._config(values, read_keys(data, cls.config_keys, where), architecture,
                           bos_token_id=None if bos is None else checked(bos, int, "bos_token_id", where),
                           eos_token_ids=token_ids(data.get("eos_token_id"), "eos_token_id", where),
                           name=str(data.get("_name_or_path") or where))

    @classmethod
    def config_from_gguf(cls, metadata: Mapping[str, Any], tensor_names: Collection[str], architecture: str,
                         where: str) -> ModelConfig:
        """The config of a GGUF file's metadata; see :meth:`CausalLM.config_from_gguf`.

        The vocabulary size defaults to the number of ``tokenizer.ggml.tokens``; the output head is
        tied when the file has no ``output.weight``. Rope scaling is refused, whether the file names it
        (``{arch}.rope.scaling.type``) or carries its frequency factors (``rope_freqs.weight``, Llama 3.1).
        """
        arch = str(metadata.get("general.architecture"))
        scaling = metadata.get(f"{arch}.rope.scaling.type", "none")
        if scaling == "none" and "rope_freqs.weight" in tensor_names:
            scaling = "llama3 (rope_freqs.weight)"
        if scaling != "none":
            raise UnsupportedModelError(f"{where} uses rope scaling {scaling!r}; pyagent implements plain RoPE only")
        tokens = metadata.get("tokenizer.ggml.tokens") or ()
        metadata = {f"{arch}.vocab_size": len(tokens) or None, **metadata}
        values = read_keys(metadata, COMMON_CONFIG_KEYS, where, gguf_arch=arch)
        head_dim = values.get("head_dim", values["hidden_size"] // values["num_heads"])
        rotated = metadata.get(f"{arch}.rope.dimension_count", head_dim)
        if rotated != head_dim:
            raise UnsupportedModelError(f"{where} rotates only part of each head (partial RoPE: "
                                        f"{arch}.rope.dimension_count {rotated} of {head_dim}), which pyagent lacks")
        values["tie_word_embeddings"] = "output.weight" not in tensor_names
        eos = [metadata.get(f"tokenizer.ggml.{name}_token_id") for name in ("eos", "eot", "eom")]
        bos = metadata.get("tokenizer.ggml.bos_token_id")
        eos_ids = token_ids([e for e in eos if e is not None], "tokenizer.ggml.eos_token_id", where)
        bos_id = None if bos is None else checked(bos, int, "tokenizer.ggml.bos_token_id", where)
        return cls._config(values, read_keys(metadata, cls.config_keys, where, gguf_arch=arch), architecture,
                           bos_token_id=bos_id,
                           eos_token_ids=tuple(dict.fromkeys(eos_ids)),
                           name=str(metadata.get("general.name") or where))

    @classmethod
    def _config(cls, values: dict[str, Any], settings: dict[str, Any], architecture: str, **rest: Any) -> ModelConfig:
        """The config of the common ``values`` (deriving ``num_kv_heads`` and ``head_dim``) and ``settings``."""
        values.setdefault("num_kv_heads", values["num_heads"])
        values.setdefault("head_dim", values["hidden_size"] // values["num_heads"])
        return ModelConfig(architecture=architecture, settings=settings, **values, **rest)

    @classmethod
    def hf_config(cls, config: ModelConfig) -> dict[str, Any]:
        """``config`` as a ``config.json`` object (float32 weights); see :meth:`CausalLM.hf_config`."""
        common = {key.hf_key: getattr(config, key.field) for key in COMMON_CONFIG_KEYS}
        extra = {key.hf_key: config.settings[key.field] for key in cls.config_keys if key.field in config.settings}
        return {
            "architectures": [cls.hf_architecture], "model_type": cls.model_type, "_name_or_path": config.name,
            **common, **extra, "hidden_act": "silu", "bos_token_id": config.bos_token_id,
            "eos_token_id": list(config.eos_token_ids), "torch_dtype": "float32",
        }

    @classmethod
    def weight_shapes(cls, config: ModelConfig) -> dict[str, tuple[int, ...]]:
        """Hugging Face parameter name -> shape, for every weight the forward reads."""
        hidden, inter, dim, layout = config.hidden_size, config.intermediate_size, config.head_dim, cls.layout
        q_rows, kv_rows = config.num_heads * dim, config.num_kv_heads * dim
        shapes: dict[str, tuple[int, ...]] = {
            "model.embed_tokens.weight": (config.vocab_size, hidden),
            "model.norm.weight": (hidden,),
        }
        if not config.tie_word_embeddings:
            shapes["lm_head.weight"] = (config.vocab_size, hidden)
        qkv_rows = (q_rows, kv_rows, kv_rows) if len(layout.qkv) == 3 else (q_rows + 2 * kv_rows,)
        gate_up_rows = (inter, inter) if len(layout.gate_up) == 2 else (2 * inter,)
        for i in range(config.num_layers):
            prefix = layer_prefix(i)
            shapes |= {prefix + "input_layernorm.weight": (hidden,)}
            for name, rows in zip(layout.qkv, qkv_rows, strict=True):
                shapes[f"{prefix}{name}.weight"] = (rows, hidden)
                if layout.qkv_bias:
                    shapes[f"{prefix}{name}.bias"] = (rows,)
            if layout.qk_norm:
                shapes |= {prefix + "self_attn.q_norm.weight": (dim,), prefix + "self_attn.k_norm.weight": (dim,)}
            shapes |= {prefix + "self_attn.o_proj.weight": (hidden, q_rows),
                       prefix + "post_attention_layernorm.weight": (hidden,)}
            for name, rows in zip(layout.gate_up, gate_up_rows, strict=True):
                shapes[f"{prefix}{name}.weight"] = (rows, hidden)
            shapes[prefix + "mlp.down_proj.weight"] = (hidden, inter)
        return shapes

    @classmethod
    def gguf_tensor_names(cls, config: ModelConfig) -> dict[str, str]:
        """GGUF tensor name -> Hugging Face name, through the ``gguf`` package's map of :attr:`gguf_arch`."""
        tensor_map = gguf.get_tensor_name_map(cls.gguf_arch, config.num_layers)
        names = {}
        for hf_name in cls.weight_shapes(config):
            base, _, suffix = hf_name.rpartition(".")
            gguf_name = tensor_map.get_name(base)
            if gguf_name is None:
                raise ValueError(f"{cls.__name__}: the gguf package maps no {gguf.MODEL_ARCH_NAMES[cls.gguf_arch]} "
                                 f"tensor to {hf_name}")
            names[f"{gguf_name}.{suffix}"] = hf_name
        return names

    @classmethod
    def gguf_permuted_heads(cls, config: ModelConfig) -> dict[str, int]:
        """The q and k projections (with their head counts) when :attr:`gguf_permutes_qk`."""
        if not cls.gguf_permutes_qk:
            return {}
        q, k, _ = cls.layout.qkv
        return {name: heads for i in range(config.num_layers)
                for name, heads in ((f"{layer_prefix(i)}{q}.weight", config.num_heads),
                                    (f"{layer_prefix(i)}{k}.weight", config.num_kv_heads))}

    # --- the forward ---------------------------------------------------------------------------

    def __init__(self, options: Mapping[str, Any], context: ModelContext) -> None:
        super().__init__(options, context)
        config, weights = context.config, context.weights
        check_weights(config, weights, self.weight_shapes(config))
        if context.dtype not in DTYPES:
            raise ValueError(f"model dtype {context.dtype!r} is not supported; choose one of: {', '.join(DTYPES)}")
        self.dtype = dtype = DTYPES[context.dtype]
        self.device = torch.device(context.device)
        keep_quantized = context.quantized and self.device.type == "cpu"
        self.precision: Precision = "int8" if context.precision == "int8" else "exact"

        def dense(*names: str) -> torch.Tensor:
            parts = [weights[name] for name in names]
            tensors = [part.dequantize() if isinstance(part, QuantizedWeight) else part for part in parts]
            fused = tensors[0] if len(tensors) == 1 else torch.cat(tensors)
            return fused.to(device=self.device, dtype=dtype).contiguous()

        def get(*names: str) -> Weight:
            parts = [weights[name] for name in names]
            quantized = [part for part in parts if isinstance(part, QuantizedWeight)]
            if keep_quantized and len(quantized) == len(parts) and self._runs(quantized):
                fused = quantized[0] if len(quantized) == 1 else QuantizedWeight.cat(quantized)
                if self.precision == "int8":
                    fused.int8_parts()  # interleave the blocks now, not in the first step
                return fused
            return dense(*names)

        layout = self.layout
        self.embed_tokens = get("model.embed_tokens.weight")
        self.norm = dense("model.norm.weight")
        self.lm_head = self.embed_tokens if config.tie_word_embeddings else get("lm_head.weight")

        def layer(i: int) -> LayerWeights:
            prefix = layer_prefix(i)
            return LayerWeights(
                input_norm=dense(prefix + "input_layernorm.weight"),
                qkv=get(*(f"{prefix}{name}.weight" for name in layout.qkv)),
                qkv_bias=dense(*(f"{prefix}{name}.bias" for name in layout.qkv)) if layout.qkv_bias else None,
                q_norm=dense(prefix + "self_attn.q_norm.weight") if layout.qk_norm else None,
                k_norm=dense(prefix + "self_attn.k_norm.weight") if layout.qk_norm else None,
                o_proj=get(prefix + "self_attn.o_proj.weight"),
                post_norm=dense(prefix + "post_attention_layernorm.weight"),
                gate_up=get(*(f"{prefix}{name}.weight" for name in layout.gate_up)),
                down=get(prefix + "mlp.down_proj.weight"),
            )

        self.layers = [layer(i) for i in range(config.num_layers)]
        self.rope_cos, self.rope_sin = self._rope_tables()
        self._step_lock = threading.Lock()
        self._plans: dict[tuple[int, int], StepPlan] = {}
        self._workspace = Workspace(config, dtype, self.device, REUSED_STEP_TOKENS)
        #: The LoRA slots (:meth:`enable_lora`), or ``None``.
        self.lora: LoRASlots | None = None
        self._lora_plans: dict[tuple[int, int], tuple[StepPlan, torch.Tensor, int]] = {}

    def _runs(self, parts: Sequence[QuantizedWeight]) -> bool:
        """Whether quantized ``parts`` (one fused matrix) can stay in their blocks at this precision: int8
        reads each part's GGUF blocks (any mix of formats, if the blocks are known); exact needs one block
        layout that holds them all."""
        if self.precision == "int8":
            return all(part.gguf_parts is not None for part in parts) and len({p.in_features for p in parts}) == 1
        return shared_format(parts) is not None

    def _rope_tables(self) -> tuple[torch.Tensor, torch.Tensor]:
        """``cos`` and ``sin`` of every position's rotation angles, ``[max_positions, head_dim]``.

        Angles are computed in float32 (``position * theta ** (-2i / head_dim)``), repeated for the
        two halves of a head, and rounded to the working dtype once.
        """
        cfg = self.config
        exponents = torch.arange(0, cfg.head_dim, 2, dtype=torch.int64, device=self.device).float() / cfg.head_dim
        inv_freq = 1.0 / (cfg.rope_theta**exponents)
        positions = torch.arange(cfg.max_position_embeddings, device=self.device).float()
        angles = torch.outer(positions, inv_freq)
        angles = torch.cat((angles, angles), dim=-1)
        return angles.cos().to(self.dtype), angles.sin().to(self.dtype)

    def decode_weight_bytes(self) -> int:
        """Bytes of weights a one-token step reads: every layer's matrices (a quantized one in the layout
        its precision reads: int8's is the GGUF file's bytes, exact's widens the scales and splits the
        K-quants), the norms, and the whole output head (plus the token's embedding row when the head is
        not tied to it). The bound a memory-bound decode step cannot beat is this over the bandwidth."""

        def size(weight: Weight | None) -> int:
            if weight is None:
                return 0
            if isinstance(weight, QuantizedWeight):
                if self.precision == "int8":
                    return sum(groups.numel() for _, groups, _ in weight.int8_parts())
                return weight.packed.numel()
            return weight.numel() * weight.element_size()

        layers = sum(size(getattr(layer, field.name)) for layer in self.layers for field in attrs.fields(LayerWeights))
        head = size(self.lm_head) + size(self.norm)
        if self.lm_head is not self.embed_tokens:
            head += size(self.embed_tokens) // self.config.vocab_size
        return layers + head

    def forward(
        self,
        input_ids: torch.Tensor,
        positions: torch.Tensor,
        kv_caches: Sequence[torch.Tensor],
        metadata: AttentionMetadata,
        attention: AttentionBackend,
        logits_indices: torch.Tensor,
        threads: int | None = None,
        lora_slots: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """See :meth:`CausalLM.forward`.

        Steps of up to :data:`REUSED_STEP_TOKENS` tokens (decode, draft verification) run on buffers and
        kernel calls this model keeps between steps (one step at a time: a call made while another
        thread's step runs gets its own); larger ones prepare theirs for the step. A step whose
        ``lora_slots`` name adapters runs the plan with its LoRA calls (kept the same way).
        """
        tokens = input_ids.shape[0]
        if input_ids.dim() != 1 or positions.shape != (tokens,):
            raise ValueError(
                f"input_ids and positions must both be [num_tokens]; got {list(input_ids.shape)} and "
                f"{list(positions.shape)}"
            )
        slots = None if lora_slots is None else self._step_lora_slots(lora_slots, tokens)
        if threads is None:
            threads = torch.get_num_threads()
        if tokens <= REUSED_STEP_TOKENS and self._step_lock.acquire(blocking=False):
            try:
                if slots is not None:
                    adapted = self._reused_lora_plan(tokens, threads, slots)
                    return self._run(adapted, input_ids, positions, kv_caches, metadata, attention, logits_indices)
                plan = self._plans.get((tokens, threads))
                if plan is None or plan.layers != self.layers:
                    plan = self._plans[tokens, threads] = self._plan(self._workspace, tokens, threads)
                return self._run(plan, input_ids, positions, kv_caches, metadata, attention, logits_indices)
            finally:
                self._step_lock.release()
        plan = self._plan(Workspace(self.config, self.dtype, self.device, tokens), tokens, threads)
        if slots is not None:
            assert self.lora is not None
            self.lora.weave(plan, self.layers, slots)
        return self._run(plan, input_ids, positions, kv_caches, metadata, attention, logits_indices)

    def _plan(self, workspace: Workspace, tokens: int, threads: int) -> StepPlan:
        return StepPlan(self.config, self.layers, workspace, tokens, threads, self.precision, self.norm)

    # --- LoRA adapters -------------------------------------------------------------------------

    @classmethod
    def lora_targets(cls, config: ModelConfig) -> dict[str, tuple[int, int]]:
        """Every q/k/v, o, gate/up and down projection weight of every layer, with its ``(out, in)``;
        see :meth:`CausalLM.lora_targets`."""
        shapes = cls.weight_shapes(config)
        return {name: (shapes[name][0], shapes[name][1]) for name in decoder_targets(cls.layout, config)
                if name in shapes}

    @classmethod
    def read_lora(cls, path: str | Path, config: ModelConfig, name: str | None = None) -> LoRAAdapter:
        """A PEFT folder or a llama.cpp LoRA GGUF of :attr:`gguf_arch`; see :meth:`CausalLM.read_lora`
        and :func:`pyagent_model_base.lora.reading.read_adapter`."""
        return read_adapter(path, cls.lora_targets(config), config, gguf_arch=gguf.MODEL_ARCH_NAMES[cls.gguf_arch],
                            gguf_names=cls.gguf_tensor_names(config), permuted_heads=cls.gguf_permuted_heads(config),
                            name=name)

    def enable_lora(self, settings: LoRASettings) -> None:
        """Set up ``settings.max_loras`` empty slots; see :meth:`CausalLM.enable_lora`."""
        self.lora = LoRASlots(self.layout, self.config, self.weight_shapes(self.config), settings, self.dtype)
        self._lora_plans.clear()

    def load_lora(self, slot: int, adapter: LoRAAdapter) -> None:
        """See :meth:`CausalLM.load_lora`."""
        self._enabled_lora().load(slot, adapter)

    def unload_lora(self, slot: int) -> None:
        """See :meth:`CausalLM.unload_lora`."""
        self._enabled_lora().unload(slot)

    def _enabled_lora(self) -> LoRASlots:
        if self.lora is None:
            raise LoRAAdapterError("LoRA is not enabled on this model; call enable_lora(LoRASettings(max_loras, "
                                   "max_lora_rank)) first")
        return self.lora

    def _step_lora_slots(self, lora_slots: torch.Tensor, tokens: int) -> torch.Tensor | None:
        """The step's slots (int32), or ``None`` when no row uses an adapter."""
        if self.lora is None:
            if lora_slots.shape != (tokens,) or bool((lora_slots != -1).any()):
                raise LoRAAdapterError("lora_slots names adapters, but LoRA is not enabled on this model; call "
                                       "enable_lora first, or pass None (all -1) for the base model")
            return None
        return self.lora.step_slots(lora_slots, tokens)

    def _reused_lora_plan(self, tokens: int, threads: int, slots: torch.Tensor) -> StepPlan:
        """The kept plan with LoRA calls for steps of ``tokens`` tokens, its slot buffer holding ``slots``."""
        assert self.lora is not None
        kept = self._lora_plans.get((tokens, threads))
        if kept is None or kept[0].layers != self.layers or kept[2] != self.lora.version:
            plan, buffer = self._plan(self._workspace, tokens, threads), torch.empty(tokens, dtype=torch.int32)
            self.lora.weave(plan, self.layers, buffer)
            kept = self._lora_plans[tokens, threads] = (plan, buffer, self.lora.version)
        kept[1].copy_(slots)
        return kept[0]

    def _run(
        self,
        plan: StepPlan,
        input_ids: torch.Tensor,
        positions: torch.Tensor,
        kv_caches: Sequence[torch.Tensor],
        metadata: AttentionMetadata,
        attention: AttentionBackend,
        logits_indices: torch.Tensor,
    ) -> torch.Tensor:
        """:meth:`forward` on ``plan``'s buffers."""
        hidden = plan.hidden
        torch.index_select(self.rope_cos, 0, positions, out=plan.cos)
        torch.index_select(self.rope_sin, 0, positions, out=plan.sin)
        if isinstance(self.embed_tokens, QuantizedWeight):
            hidden.copy_(self.embed_tokens.rows(input_ids, self.dtype))
        else:
            torch.index_select(self.embed_tokens, 0, input_ids, out=hidden)
        program = plan.step_program(attention, kv_caches) if plan.calls else None
        if program is not None:
            attention.begin_step(metadata)
            program.run()
        else:
            self._run_layers(plan, kv_caches, metadata, attention)
            run_prepared([plan.finish])
        every_row = logits_indices.shape[0] == plan.rows.shape[0] and (
            plan.rows.shape[0] == 1 or torch.equal(logits_indices, plan.rows))
        last = plan.final if every_row else plan.final[logits_indices]
        return linear(last, self.lm_head, out_dtype=torch.float32, threads=plan.threads, precision=self.precision)

    @staticmethod
    def _run_layers(plan: StepPlan, kv_caches: Sequence[torch.Tensor], metadata: AttentionMetadata,
                    attention: AttentionBackend) -> None:
        """Each layer's programs around the backend's :meth:`forward` (a backend that prepares no call)."""
        q, k, v, attended = plan.q, plan.k, plan.v, plan.attended
        for index, (before, after) in enumerate(plan.programs()):
            before.run()
            out = attention.forward(q, k, v, kv_caches[index], metadata, index)
            if out.shape != attended.shape or out.dtype != attended.dtype:
                raise ValueError(
                    f"attention backend {type(attention).__name__} returned {out.dtype} {list(out.shape)} at layer "
                    f"{index}; forward must return [num_tokens, num_heads, head_size] like q: "
                    f"{attended.dtype} {list(attended.shape)}"
                )
            attended.copy_(out)
            after.run()
