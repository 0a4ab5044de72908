"""A step's activation buffers and every decoder layer's kernel calls on them, checked once.

:class:`Workspace` holds ``[rows, width]`` buffers per activation; :class:`StepPlan` views the first
``tokens`` rows of each and prepares each layer's calls, run as :class:`pyagent_kernels.program.Program`
objects (each run of consecutive C kernel calls is one call into C), so a step runs kernels only. The
operations no kernel covers (a q/k/v bias, per-head q/k RMSNorm) are prepared torch calls on the same
buffers (:func:`torch_step`).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Sequence
from typing import cast

import attrs
import torch

from pyagent_core.interfaces.attention import AttentionBackend
from pyagent_core.interfaces.model import ModelConfig
from pyagent_kernels import PreparedCall
from pyagent_kernels.layer_ops import prepare_add_rms_norm, prepare_rope_split, prepare_silu_mul
from pyagent_kernels.linear import Precision, prepare_linear
from pyagent_kernels.program import Program
from pyagent_kernels.quantized import QuantizedWeight

#: Steps of at most this many tokens reuse their model's buffers and prepared kernel calls; larger
#: steps (prefill) spend more time in the kernels than the ~1 ms preparing theirs takes.
REUSED_STEP_TOKENS = 64


@attrs.frozen(eq=False)
class LayerWeights:
    """The weights of one decoder layer, fused where one matmul can replace several.

    Attributes:
        input_norm: ``[hidden]`` RMSNorm weight before attention.
        qkv: ``[(num_heads + 2 * num_kv_heads) * head_dim, hidden]``: q, k and v projections stacked.
        qkv_bias: ``[(num_heads + 2 * num_kv_heads) * head_dim]`` or ``None``.
        q_norm, k_norm: ``[head_dim]`` RMSNorm weights of each query and key head, or ``None``.
        o_proj: ``[hidden, num_heads * head_dim]``.
        post_norm: ``[hidden]`` RMSNorm weight before the MLP.
        gate_up: ``[2 * intermediate, hidden]``: gate and up projections stacked.
        down: ``[hidden, intermediate]``.
    """

    input_norm: torch.Tensor
    qkv: torch.Tensor | QuantizedWeight
    qkv_bias: torch.Tensor | None
    q_norm: torch.Tensor | None
    k_norm: torch.Tensor | None
    o_proj: torch.Tensor | QuantizedWeight
    post_norm: torch.Tensor
    gate_up: torch.Tensor | QuantizedWeight
    down: torch.Tensor | QuantizedWeight


def torch_step(name: str, run: Callable[[], object], tensors: tuple[torch.Tensor, ...]) -> PreparedCall:
    """A prepared call of ``run()``, torch operations in place on buffers of the plan (``tensors``)."""

    def call() -> int:
        run()
        return 0

    return PreparedCall(call, (), name, tensors)


def head_rms_norm(heads: torch.Tensor, weight: torch.Tensor, eps: float) -> None:
    """RMSNorm of each head of ``heads [tokens, n, head_dim]`` in place, in float32 as transformers
    computes it: ``weight * (x * rsqrt(mean(x ** 2) + eps))``, rounded to the dtype before the weight."""
    values = heads.float()
    normed = values * torch.rsqrt(values.pow(2).mean(-1, keepdim=True) + eps)
    heads.copy_(weight * normed.to(heads.dtype))


class Workspace:
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


class StepPlan:
    """A step's buffers and every layer's kernel calls on them, checked once.

    Per layer, ``calls[i]`` is ``(before, after)``: ``before`` adds the previous layer's MLP output
    (``delta``) to ``hidden``, normalizes it and projects it into ``qkv`` (adding the bias and
    normalizing the q/k heads where the layer has them), then rotates and splits it into ``q``,
    ``k``, ``v``; the attention output then goes into ``attended``; ``after`` projects it, adds it to
    ``hidden`` and runs the MLP into ``delta``. ``finish`` adds the last layer's ``delta`` to ``hidden``
    and normalizes every row with ``final_norm`` into ``final``, whose rows the output head reads.
    Products with quantized weights run at ``precision`` (:func:`pyagent_kernels.linear.linear`'s
    "exact" or "int8"). Whoever changes ``calls`` (LoRA inserts its own) assigns a new list;
    :meth:`programs` follows it.
    """

    def __init__(self, config: ModelConfig, layers: Sequence[LayerWeights], workspace: Workspace, tokens: int,
                 threads: int, precision: Precision, final_norm: torch.Tensor) -> None:
        heads, kv_heads, dim, eps = config.num_heads, config.num_kv_heads, config.head_dim, config.rms_norm_eps
        take = workspace.take
        self.layers = list(layers)
        self.threads = threads
        self.hidden, self.cos, self.sin, self.delta = (take(name, tokens) for name in ("hidden", "cos", "sin", "delta"))
        self.q = take("q", tokens, heads, dim)
        self.k, self.v = take("k", tokens, kv_heads, dim), take("v", tokens, kv_heads, dim)
        self.attended = take("attended", tokens, heads, dim)
        normed, qkv, projected = take("normed", tokens), take("qkv", tokens), take("projected", tokens)
        gate_up, activated = take("gate_up", tokens), take("activated", tokens)
        q_heads = qkv[:, : heads * dim].view(tokens, heads, dim)
        k_heads = qkv[:, heads * dim : (heads + kv_heads) * dim].view(tokens, kv_heads, dim)

        def projection(index: int, layer: LayerWeights) -> tuple[PreparedCall, ...]:
            calls = [
                prepare_add_rms_norm(self.hidden, layer.input_norm, eps, self.delta if index else None, normed,
                                     threads=threads),
                prepare_linear(normed, layer.qkv, qkv, threads=threads, precision=precision),
            ]
            bias, q_norm, k_norm = layer.qkv_bias, layer.q_norm, layer.k_norm
            if bias is not None:
                calls.append(torch_step("qkv_bias", lambda: qkv.add_(bias), (qkv, bias)))
            if q_norm is not None and k_norm is not None:
                calls.append(torch_step("qk_norm", lambda: (head_rms_norm(q_heads, q_norm, eps),
                                                            head_rms_norm(k_heads, k_norm, eps)),
                                        (qkv, q_norm, k_norm)))
            calls.append(prepare_rope_split(qkv, self.cos, self.sin, heads, kv_heads, dim, (self.q, self.k, self.v),
                                            threads=threads))
            return tuple(calls)

        self.calls: list[tuple[tuple[PreparedCall, ...], tuple[PreparedCall, ...]]] = [
            (
                projection(index, layer),
                (
                    prepare_linear(self.attended.view(tokens, heads * dim), layer.o_proj, projected, threads=threads,
                                   precision=precision),
                    prepare_add_rms_norm(self.hidden, layer.post_norm, eps, projected, normed, threads=threads),
                    prepare_linear(normed, layer.gate_up, gate_up, threads=threads, precision=precision),
                    prepare_silu_mul(gate_up, activated, threads=threads),
                    prepare_linear(activated, layer.down, self.delta, threads=threads, precision=precision),
                ),
            )
            for index, layer in enumerate(self.layers)
        ]
        self.final = normed
        self.finish = prepare_add_rms_norm(self.hidden, final_norm, eps, self.delta if self.layers else None, normed,
                                           threads=threads)
        #: ``0 .. tokens - 1``: the logits rows of a step that wants every row's, in order.
        self.rows = torch.arange(tokens)
        self._programs: tuple[object, list[tuple[Program, Program]]] | None = None
        self._step_programs: weakref.WeakKeyDictionary[AttentionBackend, tuple[object, tuple[torch.Tensor, ...],
                                                                              Program | None]]
        self._step_programs = weakref.WeakKeyDictionary()

    def programs(self) -> list[tuple[Program, Program]]:
        """``calls`` as programs, ``(before, after)`` per layer; made again when ``calls`` was replaced."""
        if self._programs is None or self._programs[0] is not self.calls:
            self._programs = self.calls, [(Program(before), Program(after)) for before, after in self.calls]
        return self._programs[1]

    def step_program(self, attention: AttentionBackend, kv_caches: Sequence[torch.Tensor]) -> Program | None:
        """Every layer's calls with ``attention``'s prepared call (:meth:`AttentionBackend.prepare
        <pyagent_core.interfaces.attention.AttentionBackend.prepare>`) between ``before`` and ``after``,
        then ``finish``, as one program: a step whose calls are all C calls is then one call into C.
        ``None`` when the backend prepares no call. Kept per backend (dropped with it) and made again
        when ``calls`` was replaced or other caches arrive; run it after ``attention.begin_step(metadata)``."""
        kept = self._step_programs.get(attention)
        if (kept is None or kept[0] is not self.calls or len(kept[1]) != len(kv_caches)
                or any(a is not b for a, b in zip(kept[1], kv_caches, strict=True))):
            kept = self.calls, tuple(kv_caches), self._with_attention(attention, kv_caches)
            self._step_programs[attention] = kept
        return kept[2]

    def _with_attention(self, attention: AttentionBackend, kv_caches: Sequence[torch.Tensor]) -> Program | None:
        calls: list[PreparedCall] = []
        for index, (before, after) in enumerate(self.calls):
            prepared = attention.prepare(self.q, self.k, self.v, self.attended, kv_caches[index], index)
            if prepared is None:
                return None
            calls += [*before, cast(PreparedCall, prepared), *after]
        return Program([*calls, self.finish])
