"""What sets one family's decoder layer apart from Llama's: :class:`DecoderLayout`."""

from __future__ import annotations

import attrs


def _names(value: tuple[str, ...] | list[str] | str) -> tuple[str, ...]:
    return (value,) if isinstance(value, str) else tuple(value)


@attrs.frozen
class DecoderLayout:
    """A pre-norm decoder layer: RMSNorm, q/k/v projection, rotate-half RoPE, attention, output
    projection and residual; RMSNorm, gate/up projection, SwiGLU, down projection and residual.

    Attributes:
        qkv: the Hugging Face names (after ``model.layers.N.``, without ``.weight``) of the query,
            key and value projections, stacked in that order: three (Llama) or one fused matrix (Phi-3).
        gate_up: the names of the gate and up projections: two, or one fused ``[gate | up]`` matrix.
        qkv_bias: the q/k/v projections have biases (``<name>.bias``; Qwen2).
        qk_norm: an RMSNorm over each query and key head before RoPE, weights
            ``self_attn.q_norm.weight`` and ``self_attn.k_norm.weight`` of ``[head_dim]`` (Qwen3).
    """

    qkv: tuple[str, ...] = attrs.field(default=("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"),
                                       converter=_names)
    gate_up: tuple[str, ...] = attrs.field(default=("mlp.gate_proj", "mlp.up_proj"), converter=_names)
    qkv_bias: bool = False
    qk_norm: bool = False

    @qkv.validator
    def _three_or_fused(self, _attr: object, value: tuple[str, ...]) -> None:
        if len(value) not in (1, 3):
            raise ValueError(f"qkv names the q, k and v projections (3) or one fused matrix (1), got {value}")

    @gate_up.validator
    def _two_or_fused(self, _attr: object, value: tuple[str, ...]) -> None:
        if len(value) not in (1, 2):
            raise ValueError(f"gate_up names the gate and up projections (2) or one fused matrix (1), got {value}")
