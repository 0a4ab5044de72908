"""The Llama-family forward pass in torch, over a paged KV cache and a pluggable attention backend.

Per layer: RMSNorm, one fused q/k/v projection, rotate-half RoPE at each token's position, attention
through the :class:`~pyagent_core.interfaces.attention.AttentionBackend` (which also writes the new
keys and values into the layer's cache), output projection and residual; RMSNorm, a fused
gate/up projection, SwiGLU, down projection and residual. A final RMSNorm and the output head
(tied to the embedding when the model says so) give float32 logits for the requested rows only.
Every matrix product is :mod:`pyagent_kernels.linear`'s kernel, whose rows do not depend on the
other rows of the batch, so a sequence's tokens do not depend on its batch; the norms, RoPE
and SwiGLU between them are one call each (:mod:`pyagent_kernels.layer_ops`). A weight may be
a :class:`~pyagent_kernels.quantized.QuantizedWeight` (a GGUF file's blocks, decoded by the kernel
into the values the dequantized matrix holds), which gives the same bits from fewer bytes.

The batch is flat: ``num_tokens`` new tokens of any number of sequences, placed by the attention
metadata, so prefill, chunked prefill and decode steps are the same call. A step runs on activation
buffers allocated once for it, with every kernel call between two attention calls checked once and
then run as it is (:func:`pyagent_kernels.run_prepared`); small steps (decode, draft verification)
keep theirs for the next step of the same size, so a decode step spends its time in the kernels.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Mapping, Sequence

import attrs
import torch

from pyagent_core.errors import ModelFormatError
from pyagent_core.interfaces.attention import AttentionBackend, AttentionMetadata
from pyagent_engine.memory import check_fits
from pyagent_engine.models.checkpoint import Weight
from pyagent_engine.models.config import ModelConfig
from pyagent_kernels import run_prepared
from pyagent_kernels.layer_ops import add_rms_norm, prepare_add_rms_norm, prepare_rope_split, prepare_silu_mul
from pyagent_kernels.linear import linear, prepare_linear
from pyagent_kernels.quantized import QuantizedWeight, shared_format

#: Steps of at most this many tokens reuse their model's buffers and prepared kernel calls; larger
#: steps (prefill) spend more time in the kernels than the ~1 ms preparing theirs takes.
REUSED_STEP_TOKENS = 64


def weight_shapes(config: ModelConfig) -> dict[str, tuple[int, ...]]:
    """Hugging Face parameter name -> shape, for every weight the forward reads."""
    hidden, inter, dim = config.hidden_size, config.intermediate_size, config.head_dim
    shapes: dict[str, tuple[int, ...]] = {
        "model.embed_tokens.weight": (config.vocab_size, hidden),
        "model.norm.weight": (hidden,),
    }
    if not config.tie_word_embeddings:
        shapes["lm_head.weight"] = (config.vocab_size, hidden)
    for i in range(config.num_layers):
        prefix = f"model.layers.{i}."
        shapes |= {
            prefix + "input_layernorm.weight": (hidden,),
            prefix + "self_attn.q_proj.weight": (config.num_heads * dim, hidden),
            prefix + "self_attn.k_proj.weight": (config.num_kv_heads * dim, hidden),
            prefix + "self_attn.v_proj.weight": (config.num_kv_heads * dim, hidden),
            prefix + "self_attn.o_proj.weight": (hidden, config.num_heads * dim),
            prefix + "post_attention_layernorm.weight": (hidden,),
            prefix + "mlp.gate_proj.weight": (inter, hidden),
            prefix + "mlp.up_proj.weight": (inter, hidden),
            prefix + "mlp.down_proj.weight": (hidden, inter),
        }
    return shapes


def check_weights(config: ModelConfig, weights: Mapping[str, Weight]) -> None:
    """Raise :class:`ModelFormatError` naming missing weights or weights of the wrong shape."""
    expected = weight_shapes(config)
    missing = sorted(set(expected) - set(weights))
    if missing:
        shown = ", ".join(missing[:5]) + (f" and {len(missing) - 5} more" if len(missing) > 5 else "")
        raise ModelFormatError(f"model {config.name!r} lacks {len(missing)} weights: {shown}")
    for name, shape in expected.items():
        if tuple(weights[name].shape) != shape:
            raise ModelFormatError(
                f"model {config.name!r}: weight {name} has shape {list(weights[name].shape)}, "
                f"the config implies {list(shape)}"
            )


def allocate_kv_caches(
    config: ModelConfig, num_blocks: int, block_size: int, dtype: torch.dtype, device: str | torch.device = "cpu"
) -> list[torch.Tensor]:
    """One zeroed paged cache per layer, ``[2, num_blocks, block_size, num_kv_heads, head_dim]``.

    Raises :class:`ConfigError` when they would not fit in the memory ``device`` has available.
    """
    shape = (2, num_blocks, block_size, config.num_kv_heads, config.head_dim)
    nbytes = math.prod(shape) * dtype.itemsize * config.num_layers
    check_fits(nbytes, torch.device(device), f"the KV cache ({num_blocks} blocks of {block_size} tokens)",
               "lower kv_cache_gib (--kv-cache-gib)")
    return [torch.zeros(shape, dtype=dtype, device=device) for _ in range(config.num_layers)]


@attrs.frozen(eq=False)
class LayerWeights:
    """The weights of one decoder layer, fused where one matmul can replace several.

    Attributes:
        input_norm: ``[hidden]`` RMSNorm weight before attention.
        qkv: ``[(num_heads + 2 * num_kv_heads) * head_dim, hidden]``: q, k and v projections stacked.
        o_proj: ``[hidden, num_heads * head_dim]``.
        post_norm: ``[hidden]`` RMSNorm weight before the MLP.
        gate_up: ``[2 * intermediate, hidden]``: gate and up projections stacked.
        down: ``[hidden, intermediate]``.
    """

    input_norm: torch.Tensor
    qkv: Weight
    o_proj: Weight
    post_norm: torch.Tensor
    gate_up: Weight
    down: Weight


class LlamaModel:
    """A Llama-family decoder with its weights in ``dtype`` on ``device``.

    Args:
        config: the model's hyper-parameters.
        weights: Hugging Face parameter name -> tensor (any float dtype; converted) or
            :class:`QuantizedWeight` (kept as it is; parts of different block formats are fused in
            a layout that holds them all exactly, see :func:`shared_format`, and a quantized part
            fused with a dense one, or with no such layout, is dequantized). Checked against
            ``config`` (:class:`ModelFormatError` naming a missing or misshapen weight).
        dtype: the dtype of weights, activations and KV cache (``torch.float32`` or ``torch.bfloat16``).
        device: where the weights live.
        quantized: keep :class:`QuantizedWeight` matrices in their blocks (on CPU; the same results
            from fewer bytes read); false dequantizes them to ``dtype`` here.

    The kernel calls of :meth:`forward` hold the weights' memory: change a weight in place
    (``copy_``) or replace a layer's :class:`LayerWeights` in :attr:`layers`, never a tensor's
    storage (``.data =``, ``resize_``, ``set_``).
    """

    def __init__(
        self,
        config: ModelConfig,
        weights: Mapping[str, Weight],
        dtype: torch.dtype = torch.float32,
        device: str | torch.device = "cpu",
        quantized: bool = True,
    ) -> None:
        check_weights(config, weights)
        self.config = config
        self.dtype = dtype
        self.device = torch.device(device)
        keep_quantized = quantized

        def dense(*names: str) -> torch.Tensor:
            parts = [weights[name] for name in names]
            tensors = [part.dequantize() if isinstance(part, QuantizedWeight) else part for part in parts]
            fused = tensors[0] if len(tensors) == 1 else torch.cat(tensors)
            return fused.to(device=self.device, dtype=dtype).contiguous()

        def get(*names: str) -> Weight:
            parts = [weights[name] for name in names]
            quantized = [part for part in parts if isinstance(part, QuantizedWeight)]
            if (keep_quantized and len(quantized) == len(parts) and self.device.type == "cpu"
                    and shared_format(quantized) is not None):
                return quantized[0] if len(quantized) == 1 else QuantizedWeight.cat(quantized)
            return dense(*names)

        self.embed_tokens = get("model.embed_tokens.weight")
        self.norm = dense("model.norm.weight")
        self.lm_head = self.embed_tokens if config.tie_word_embeddings else get("lm_head.weight")
        self.layers = [
            LayerWeights(
                input_norm=dense(f"model.layers.{i}.input_layernorm.weight"),
                qkv=get(*(f"model.layers.{i}.self_attn.{p}_proj.weight" for p in "qkv")),
                o_proj=get(f"model.layers.{i}.self_attn.o_proj.weight"),
                post_norm=dense(f"model.layers.{i}.post_attention_layernorm.weight"),
                gate_up=get(f"model.layers.{i}.mlp.gate_proj.weight", f"model.layers.{i}.mlp.up_proj.weight"),
                down=get(f"model.layers.{i}.mlp.down_proj.weight"),
            )
            for i in range(config.num_layers)
        ]
        self.rope_cos, self.rope_sin = self._rope_tables()
        self._step_lock = threading.Lock()
        self._plans: dict[tuple[int, int], _StepPlan] = {}
        self._workspace = _Workspace(config, dtype, self.device, REUSED_STEP_TOKENS)

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

    def forward(
        self,
        input_ids: torch.Tensor,
        positions: torch.Tensor,
        kv_caches: Sequence[torch.Tensor],
        metadata: AttentionMetadata,
        attention: AttentionBackend,
        logits_indices: torch.Tensor,
        threads: int | None = None,
    ) -> torch.Tensor:
        """Run the new tokens of a batch through the model; return float32 logits of chosen rows.

        Args:
            input_ids: ``int64 [num_tokens]``, the new tokens of every sequence, concatenated.
            positions: ``int64 [num_tokens]``, each token's position in its sequence
                (``< config.max_position_embeddings``).
            kv_caches: one cache per layer, as :func:`allocate_kv_caches` makes them.
            metadata: where the tokens sit in the caches (shared by all layers).
            attention: the backend, constructed with this model's head counts and
                :attr:`ModelConfig.attention_scale`; it writes each layer's new keys and values.
            logits_indices: ``int64 [n]``, the rows of the batch to compute logits for (usually
                the last new token of each sequence).
            threads: threads of the linear layers' C kernel (default: torch's intra-op thread count).

        Returns:
            ``float32 [n, vocab_size]`` logits.

        Steps of up to :data:`REUSED_STEP_TOKENS` tokens (decode, draft verification) run on buffers and
        kernel calls this model keeps between steps (one step at a time: a call made while another
        thread's step runs gets its own); larger ones prepare theirs for the step.
        """
        tokens = input_ids.shape[0]
        if input_ids.dim() != 1 or positions.shape != (tokens,):
            raise ValueError(
                f"input_ids and positions must both be [num_tokens]; got {list(input_ids.shape)} and "
                f"{list(positions.shape)}"
            )
        if threads is None:
            threads = torch.get_num_threads()
        if tokens <= REUSED_STEP_TOKENS and self._step_lock.acquire(blocking=False):
            try:
                plan = self._plans.get((tokens, threads))
                if plan is None or plan.layers != self.layers:
                    plan = self._plans[tokens, threads] = _StepPlan(self, self._workspace, tokens, threads)
                return self._run(plan, input_ids, positions, kv_caches, metadata, attention, logits_indices)
            finally:
                self._step_lock.release()
        plan = _StepPlan(self, _Workspace(self.config, self.dtype, self.device, tokens), tokens, threads)
        return self._run(plan, input_ids, positions, kv_caches, metadata, attention, logits_indices)

    def _run(
        self,
        plan: _StepPlan,
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
        q, k, v, attended = plan.q, plan.k, plan.v, plan.attended
        for index, (before, after) in enumerate(plan.calls):
            run_prepared(before)
            out = attention.forward(q, k, v, kv_caches[index], metadata, index)
            if out.shape != attended.shape or out.dtype != attended.dtype:
                raise ValueError(
                    f"attention backend {type(attention).__name__} returned {out.dtype} {list(out.shape)} at layer "
                    f"{index}; forward must return [num_tokens, num_heads, head_size] like q: "
                    f"{attended.dtype} {list(attended.shape)}"
                )
            attended.copy_(out)
            run_prepared(after)
        if plan.calls:
            hidden += plan.delta
        last = add_rms_norm(hidden[logits_indices], self.norm, self.config.rms_norm_eps)
        return linear(last, self.lm_head, out_dtype=torch.float32, threads=plan.threads)


class _Workspace:
    """The activation buffers of steps of up to ``rows`` tokens: ``[rows, width]`` per activation."""

    def __init__(self, config: ModelConfig, dtype: torch.dtype, device: torch.device, rows: int) -> None:
        hidden, dim = config.hidden_size, config.head_dim
        widths = {
            "hidden": hidden, "normed": hidden, "qkv": (config.num_heads + 2 * config.num_kv_heads) * dim,
            "q": config.num_heads * dim, "k": config.num_kv_heads * dim, "v": config.num_kv_heads * dim,
            "attended": config.num_heads * dim, "projected": hidden, "gate_up": 2 * config.intermediate_size,
            "activated": config.intermediate_size, "delta": hidden, "cos": dim, "sin": dim,
        }
        self.buffers = {name: torch.empty((rows, width), dtype=dtype, device=device) for name, width in widths.items()}

    def take(self, name: str, tokens: int, *shape: int) -> torch.Tensor:
        """The first ``tokens`` rows of buffer ``name``, viewed as ``[tokens, *shape]`` (default: 2-D)."""
        rows = self.buffers[name][:tokens]
        return rows.view(tokens, *shape) if shape else rows


class _StepPlan:
    """A step's buffers and every layer's kernel calls on them, checked once.

    Per layer, ``calls[i]`` is ``(before, after)``: ``before`` adds the previous layer's MLP output
    (``delta``) to ``hidden``, normalizes it and projects and rotates it into ``q``, ``k``, ``v``; the
    attention output then goes into ``attended``; ``after`` projects it, adds it to ``hidden`` and runs
    the MLP into ``delta``.
    """

    def __init__(self, model: LlamaModel, workspace: _Workspace, tokens: int, threads: int) -> None:
        cfg = model.config
        heads, kv_heads, dim, eps = cfg.num_heads, cfg.num_kv_heads, cfg.head_dim, cfg.rms_norm_eps
        take = workspace.take
        self.layers = list(model.layers)
        self.threads = threads
        self.hidden, self.cos, self.sin, self.delta = (take(name, tokens) for name in ("hidden", "cos", "sin", "delta"))
        self.q = take("q", tokens, heads, dim)
        self.k, self.v = take("k", tokens, kv_heads, dim), take("v", tokens, kv_heads, dim)
        self.attended = take("attended", tokens, heads, dim)
        normed, qkv, projected = take("normed", tokens), take("qkv", tokens), take("projected", tokens)
        gate_up, activated = take("gate_up", tokens), take("activated", tokens)
        self.calls = [
            (
                (
                    prepare_add_rms_norm(self.hidden, layer.input_norm, eps, self.delta if index else None, normed),
                    prepare_linear(normed, layer.qkv, qkv, threads=threads),
                    prepare_rope_split(qkv, self.cos, self.sin, heads, kv_heads, dim, (self.q, self.k, self.v)),
                ),
                (
                    prepare_linear(self.attended.view(tokens, heads * dim), layer.o_proj, projected, threads=threads),
                    prepare_add_rms_norm(self.hidden, layer.post_norm, eps, projected, normed),
                    prepare_linear(normed, layer.gate_up, gate_up, threads=threads),
                    prepare_silu_mul(gate_up, activated),
                    prepare_linear(activated, layer.down, self.delta, threads=threads),
                ),
            )
            for index, layer in enumerate(self.layers)
        ]
