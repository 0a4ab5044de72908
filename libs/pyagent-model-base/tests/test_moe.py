"""The mixture of experts: routing equal to transformers' routers (DeepSeek-V3's sigmoid with bias and
groups, Qwen3-Next's softmax, Granite's softmax over the top logits); expert products over GGUF
block-quantized experts bit-identical to the same experts dequantized (the linear kernel's guarantee);
the output against a float64 loop over tokens and experts; a token's bits alone and batched."""

from __future__ import annotations

import types

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from gguf import GGMLQuantizationType
from gguf.quants import quantize

from pyagent_kernels.quantized import QuantizedWeight
from pyagent_model_base.moe import MoeWeights, Routing, moe_forward

HIDDEN, INTER, EXPERTS = 64, 32, 8
modeling = pytest.importorskip("transformers.models.deepseek_v3.modeling_deepseek_v3")


def _sorted(weights: torch.Tensor, experts: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    order = experts.argsort(dim=-1)
    return weights.gather(1, order), experts.gather(1, order)


def test_sigmoid_routing_with_bias_and_groups_is_deepseek_v3s() -> None:
    config = types.SimpleNamespace(num_experts_per_tok=2, num_local_experts=EXPERTS, hidden_size=HIDDEN,
                                   routed_scaling_factor=2.5, n_group=4, topk_group=2, norm_topk_prob=True)
    router = modeling.DeepseekV3TopkRouter(config)
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        router.weight.copy_(torch.randn(EXPERTS, HIDDEN, generator=generator) / 8)
        router.e_score_correction_bias.copy_(0.1 * torch.randn(EXPERTS, generator=generator))
    x = torch.randn(50, HIDDEN, generator=generator)
    logits, theirs_w, theirs_e = router(x)
    ours_w, ours_e = Routing(top_k=2, scoring="sigmoid", normalize=True, scale=2.5, groups=4,
                             topk_groups=2).route(logits, router.e_score_correction_bias)
    (ours_w, ours_e), (theirs_w, theirs_e) = _sorted(ours_w, ours_e), _sorted(theirs_w, theirs_e)
    assert torch.equal(ours_e, theirs_e)
    torch.testing.assert_close(ours_w, theirs_w, atol=1e-6, rtol=1e-6)


def test_softmax_routing_renormalised_is_qwen3_next_and_granite() -> None:
    qwen = pytest.importorskip("transformers.models.qwen3_next.modeling_qwen3_next")
    granite = pytest.importorskip("transformers.models.granitemoehybrid.modeling_granitemoehybrid")
    generator = torch.Generator().manual_seed(1)
    x = torch.randn(50, HIDDEN, generator=generator)
    weight = torch.randn(EXPERTS, HIDDEN, generator=generator) / 8
    routing = Routing(top_k=3, scoring="softmax", normalize=True)
    for module, config in ((qwen.Qwen3NextTopKRouter, types.SimpleNamespace(
            num_experts_per_tok=3, num_experts=EXPERTS, norm_topk_prob=True, hidden_size=HIDDEN)),
                           (granite.GraniteMoeHybridTopKRouter, types.SimpleNamespace(
                               num_local_experts=EXPERTS, num_experts_per_tok=3, hidden_size=HIDDEN))):
        router = module(config)
        with torch.no_grad():
            router.weight.copy_(weight)
        logits, theirs_w, theirs_e = router(x)
        ours = _sorted(*routing.route(logits))
        theirs = _sorted(theirs_w, theirs_e)
        assert torch.equal(ours[1], theirs[1]), module.__name__
        torch.testing.assert_close(ours[0], theirs[0].float(), atol=1e-6, rtol=1e-6)


def _quantized(matrix: torch.Tensor, fmt: str) -> QuantizedWeight:
    blocks = quantize(matrix.numpy(), GGMLQuantizationType[fmt])
    return QuantizedWeight.from_gguf(torch.from_numpy(np.ascontiguousarray(blocks)), fmt.lower(), matrix.shape[1])


def _experts(generator: torch.Generator) -> MoeWeights:
    return MoeWeights(router=torch.randn(EXPERTS, HIDDEN, generator=generator) / 8,
                      gate_up=[torch.randn(2 * INTER, HIDDEN, generator=generator) / 8 for _ in range(EXPERTS)],
                      down=[torch.randn(HIDDEN, INTER, generator=generator) / 6 for _ in range(EXPERTS)],
                      shared_gate_up=torch.randn(2 * INTER, HIDDEN, generator=generator) / 8,
                      shared_down=torch.randn(HIDDEN, INTER, generator=generator) / 6,
                      shared_gate=torch.randn(1, HIDDEN, generator=generator) / 8)


def _reference(x: torch.Tensor, w: MoeWeights, routing: Routing) -> torch.Tensor:
    """float64, token by token, expert by expert."""
    scores, chosen = routing.route(x @ w.router.T)
    out = torch.zeros(x.shape, dtype=torch.float64)
    for t in range(x.shape[0]):
        for slot, expert in enumerate(chosen[t].tolist()):
            gate, up = (x[t].double() @ w.gate_up[expert].double().T).chunk(2)
            out[t] += float(scores[t, slot]) * (w.down[expert].double() @ (F.silu(gate) * up))
        gate, up = (x[t].double() @ w.shared_gate_up.double().T).chunk(2)
        shared = w.shared_down.double() @ (F.silu(gate) * up)
        out[t] += torch.sigmoid(x[t].double() @ w.shared_gate.double()[0]) * shared
    return out


@pytest.mark.parametrize("fmt", ["Q8_0", "Q4_0", "Q4_1"])
def test_quantized_experts_give_the_bits_of_their_dequantized_matrices(fmt: str) -> None:
    generator = torch.Generator().manual_seed(2)
    dense = _experts(generator)
    quantized = MoeWeights(router=dense.router, gate_up=[_quantized(m, fmt) for m in dense.gate_up],
                           down=[_quantized(m, fmt) for m in dense.down],
                           shared_gate_up=_quantized(dense.shared_gate_up, fmt),
                           shared_down=_quantized(dense.shared_down, fmt), shared_gate=dense.shared_gate)
    dequantized = MoeWeights(router=dense.router, gate_up=[m.dequantize() for m in quantized.gate_up],
                             down=[m.dequantize() for m in quantized.down],
                             shared_gate_up=quantized.shared_gate_up.dequantize(),
                             shared_down=quantized.shared_down.dequantize(), shared_gate=dense.shared_gate)
    routing = Routing(top_k=2)
    x = torch.randn(37, HIDDEN, generator=generator)
    assert torch.equal(moe_forward(x, quantized, routing, 1), moe_forward(x, dequantized, routing, 1))


def test_the_mixture_is_the_float64_loop_and_batch_invariant() -> None:
    generator = torch.Generator().manual_seed(3)
    weights = _experts(generator)
    routing = Routing(top_k=3, scoring="sigmoid", normalize=True, scale=1.5)
    x = torch.randn(23, HIDDEN, generator=generator)
    out = moe_forward(x, weights, routing, 2)
    torch.testing.assert_close(out.double(), _reference(x, weights, routing), atol=1e-5, rtol=1e-5)
    for t in (0, 11, 22):
        assert torch.equal(moe_forward(x[t:t + 1], weights, routing, 1), out[t:t + 1])


def test_routing_refuses_impossible_groups() -> None:
    with pytest.raises(ValueError, match="1 <= topk_groups <= groups"):
        Routing(top_k=2, groups=2, topk_groups=3)
    with pytest.raises(ValueError, match="scoring must be one of"):
        Routing(top_k=2, scoring="relu")
