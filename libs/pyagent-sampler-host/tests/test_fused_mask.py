"""Chain-level fusion of temperature / top-k / top-p / min-p into one kernel call."""

from __future__ import annotations

import pytest
import torch

from pyagent_core.interfaces.sampler import AddedRequest, BatchUpdate, SamplerContext, fusable_step
from pyagent_core.kinds import SAMPLER
from pyagent_core.registry import get_registry
from pyagent_sampler_host import fused_mask
from pyagent_sampler_host.fused_mask import apply_processors, fused_runs

STEPS = ("temperature", "top_k", "top_p", "min_p")  # the installed processors of these names fuse
ROW_PARAMS = [
    {"temperature": 0.7, "top_k": 40, "top_p": 0.9, "min_p": 0.05},
    {"temperature": 1.3, "top_k": 0, "top_p": 0.5, "min_p": 0.0},
    {"temperature": 0.0, "top_k": 5, "top_p": 1.0, "min_p": 0.2},
    {},
]


def build(names: list[str], vocab: int) -> list:
    registry = get_registry()
    processors = [registry.load(registry.get(SAMPLER, name))({}, SamplerContext(vocab)) for name in names]
    added = tuple(AddedRequest(r, p) for r, p in enumerate(ROW_PARAMS))
    for processor in processors:
        processor.update_state(BatchUpdate(len(ROW_PARAMS), added=added))
    return processors


@pytest.mark.parametrize("order", [
    "top_k,top_p,min_p,temperature", "temperature,top_k,top_p,min_p", "top_k,min_p", "top_p,top_k,temperature",
    "min_p,top_p", "temperature,top_k,temperature_never",
])
def test_fused_equals_separate(order: str) -> None:
    if fused_mask._mask_kernel() is None:
        pytest.skip("pyagent_kernels._C is not built")
    names = [n for n in order.split(",") if n in STEPS]
    vocab = 1000
    logits = torch.randn(len(ROW_PARAMS), vocab, generator=torch.Generator().manual_seed(5)) * 3
    separate = logits.clone()
    for processor in build(names, vocab):
        separate = processor.apply(separate)
    fused = apply_processors(build(names, vocab), logits.clone())
    assert torch.equal(fused, separate)


def test_runs_follow_the_kernel_order() -> None:
    def steps(order: str) -> list[list[str]]:
        runs = fused_runs(build(order.split(","), 10))
        return [[fusable_step(p) for p in run] for run in runs]

    assert steps("top_k,top_p,min_p,temperature") == [["top_k", "top_p", "min_p", "temperature"]]
    assert steps("temperature,top_k,min_p") == [["temperature", "top_k", "min_p"]]
    assert steps("top_p,top_k,temperature,min_p") == [["top_p"], ["top_k", "temperature"], ["min_p"]]
    assert steps("temperature,temperature") == [["temperature"], ["temperature"]]


def test_kept_tokens_come_from_a_fused_call_that_ends_the_chain() -> None:
    if fused_mask._mask_kernel() is None:
        pytest.skip("pyagent_kernels._C is not built")
    from pyagent_kernels.sampling import KeptTokens

    logits = torch.randn(len(ROW_PARAMS), 1000, generator=torch.Generator().manual_seed(6)) * 3
    kept = KeptTokens()
    out = apply_processors(build(["top_k", "top_p", "temperature"], 1000), logits.clone(), kept=kept)
    assert kept.matches(out)
    assert kept.tokens(0) == torch.isfinite(out[0]).nonzero().flatten().tolist()
    out = apply_processors(build(["top_p", "top_k"], 1000), logits.clone(), kept=kept)  # no fused run
    assert not kept.matches(out)
