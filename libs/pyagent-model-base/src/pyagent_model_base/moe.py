"""Mixture-of-experts feed-forward: top-k routing with the model's normalisation, routed experts and
shared experts.

**Routing** (:class:`Routing`), per token, in float32: router logits ``x @ router.T``; scores
``softmax(logits)`` (Qwen, Mixtral, Granite) or ``sigmoid(logits)`` (DeepSeek-V3); the experts are
chosen by ``scores + bias`` (DeepSeek-V3's ``e_score_correction_bias``; zero elsewhere), first among
the ``topk_groups`` groups with the largest sums of their two best scores when experts are grouped
(``groups > 1``), then the ``top_k`` best; their weights are their scores (without the bias),
renormalised to sum to one when ``normalize`` (with ``1e-20`` added to the sum for sigmoid scores,
as DeepSeek does), times ``scale`` (``routed_scaling_factor``).

**Experts**: each a SwiGLU MLP (:func:`pyagent_model_base.layers.swiglu`) over the rows of the tokens
routed to it, gathered, through :func:`pyagent_kernels.linear.linear`, so an expert's matrices may be
GGUF block-quantized (:class:`~pyagent_kernels.quantized.QuantizedWeight`) and decoded by the kernel.
A token's output is the sum of its experts' weighted outputs in ascending expert order (as
transformers adds them), then the shared experts' (optionally gated by ``sigmoid(x @ shared_gate)``,
Qwen-MoE); a row's bits do not depend on which other tokens share the batch.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import attrs
import torch

from pyagent_kernels.linear import linear
from pyagent_model_base.layers import Weight, swiglu

if TYPE_CHECKING:
    from pyagent_model_base.hybrid import WeightReader

SCORINGS = ("softmax", "sigmoid")


@attrs.frozen
class Routing:
    """How tokens choose their experts (module docstring).

    Attributes:
        top_k: experts per token.
        scoring: ``"softmax"`` or ``"sigmoid"``.
        normalize: renormalise the chosen experts' weights to sum to one.
        scale: factor on the weights (``routed_scaling_factor``).
        groups: expert groups (DeepSeek-V3's ``n_group``; 1: no grouping).
        topk_groups: groups a token may choose its experts from (``topk_group``).
    """

    top_k: int
    scoring: str = "softmax"
    normalize: bool = True
    scale: float = 1.0
    groups: int = 1
    topk_groups: int = 1

    def __attrs_post_init__(self) -> None:
        if self.scoring not in SCORINGS:
            raise ValueError(f"scoring must be one of {SCORINGS}, got {self.scoring!r}")
        if self.top_k < 1 or self.groups < 1 or not 1 <= self.topk_groups <= self.groups:
            raise ValueError(f"routing needs top_k >= 1 and 1 <= topk_groups <= groups, got top_k {self.top_k}, "
                             f"groups {self.groups}, topk_groups {self.topk_groups}")

    def route(self, logits: torch.Tensor, bias: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """``(weights float32 [tokens, top_k], experts int64 [tokens, top_k])`` of router ``logits``."""
        logits = logits.float()
        scores = logits.softmax(dim=-1) if self.scoring == "softmax" else logits.sigmoid()
        choice = scores if bias is None else scores + bias.float()
        if self.groups > 1:
            tokens, experts = choice.shape
            best_two = choice.view(tokens, self.groups, -1).topk(2, dim=-1).values.sum(dim=-1)
            chosen = best_two.topk(self.topk_groups, dim=-1, sorted=False).indices
            allowed = torch.zeros_like(best_two, dtype=torch.bool).scatter_(1, chosen, True)
            choice = choice.masked_fill(~allowed.repeat_interleave(experts // self.groups, dim=1), float("-inf"))
        experts = choice.topk(self.top_k, dim=-1, sorted=False).indices
        weights = scores.gather(1, experts)
        if self.normalize:
            total = weights.sum(dim=-1, keepdim=True)
            weights = weights / (total + 1e-20 if self.scoring == "sigmoid" else total)
        return weights * self.scale, experts


@attrs.frozen(eq=False)
class MoeWeights:
    """One layer's mixture of experts.

    Attributes:
        router: ``[experts, hidden]`` router matrix.
        gate_up: per expert, its gate and up projections stacked, ``[2 * inter, hidden]``.
        down: per expert, ``[hidden, inter]``.
        bias: ``[experts]`` added to the scores for the choice only, or ``None``.
        shared_gate_up, shared_down: the shared experts (one MLP), or ``None``.
        shared_gate: ``[1, hidden]``: the shared output is scaled by ``sigmoid(x @ shared_gate.T)``; or ``None``.
    """

    router: torch.Tensor
    gate_up: Sequence[Weight]
    down: Sequence[Weight]
    bias: torch.Tensor | None = None
    shared_gate_up: Weight | None = None
    shared_down: Weight | None = None
    shared_gate: torch.Tensor | None = None


def moe_forward(x: torch.Tensor, weights: MoeWeights, routing: Routing, threads: int) -> torch.Tensor:
    """The mixture's output for ``x [tokens, hidden]`` (module docstring), in ``x``'s dtype."""
    logits = linear(x.float().contiguous(), weights.router.float(), threads=threads)
    scores, experts = routing.route(logits, weights.bias)
    out = torch.zeros_like(x)
    for expert in experts.unique().tolist():
        tokens, slot = (experts == expert).nonzero(as_tuple=True)
        order = tokens.argsort(stable=True)
        tokens, slot = tokens[order], slot[order]
        rows = swiglu(x[tokens], weights.gate_up[expert], weights.down[expert], threads)
        out[tokens] += (rows * scores[tokens, slot, None]).to(x.dtype)  # a token meets an expert once
    if weights.shared_gate_up is not None and weights.shared_down is not None:
        shared = swiglu(x, weights.shared_gate_up, weights.shared_down, threads)
        if weights.shared_gate is not None:
            gate = linear(x.contiguous(), weights.shared_gate, threads=threads, precision="exact")
            shared = torch.sigmoid(gate) * shared
        out = out + shared
    return out


#: A layer's stacked expert tensors in GGUF files (``blk.N.`` + name), by the Hugging Face projection.
EXPERT_GGUF_NAMES = {"gate_proj": "ffn_gate_exps.weight", "up_proj": "ffn_up_exps.weight",
                     "down_proj": "ffn_down_exps.weight"}


def expert_names(prefix: str, num_experts: int) -> list[str]:
    """The Hugging Face names of the per-expert matrices under ``prefix`` (``model.layers.N.mlp.``)."""
    return [f"{prefix}experts.{e}.{proj}.weight" for e in range(num_experts) for proj in EXPERT_GGUF_NAMES]


def expert_gguf_names(layer: int) -> dict[str, str]:
    """Layer ``layer``'s stacked expert tensors, mapped to themselves (for ``gguf_restore``)."""
    return {f"blk.{layer}.{name}": f"blk.{layer}.{name}" for name in EXPERT_GGUF_NAMES.values()}


def unstack_experts(weights: dict[str, Any], layer: int, prefix: str) -> None:
    """Replace layer ``layer``'s stacked expert tensors (``[experts, rows, cols]``, or a sequence of one
    matrix per expert) by the per-expert Hugging Face weights under ``prefix``, in place."""
    for proj, name in EXPERT_GGUF_NAMES.items():
        stacked = weights.pop(f"blk.{layer}.{name}")
        for expert in range(len(stacked)):
            weights[f"{prefix}experts.{expert}.{proj}.weight"] = stacked[expert]


def load_experts(reader: WeightReader, prefix: str, num_experts: int) -> tuple[list[Weight], list[Weight]]:
    """``(gate_up, down)`` per expert from the per-expert weights under ``prefix``."""
    gate_up = [reader.matrix(f"{prefix}experts.{e}.gate_proj.weight", f"{prefix}experts.{e}.up_proj.weight")
               for e in range(num_experts)]
    down = [reader.matrix(f"{prefix}experts.{e}.down_proj.weight") for e in range(num_experts)]
    return gate_up, down
