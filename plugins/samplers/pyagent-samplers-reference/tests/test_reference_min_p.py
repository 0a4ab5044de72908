"""min_p: the conformance kit, transformers' MinPLogitsWarper and the fused C kernel."""

from __future__ import annotations

import math

import pytest
import torch
from transformers import MinPLogitsWarper

from pyagent_core.interfaces.sampler import AddedRequest, BatchUpdate, SamplerContext
from pyagent_core.testing.sampler import SamplerConformance
from pyagent_core.types import SamplerSpec
from pyagent_samplers_reference import plugin
from pyagent_samplers_reference.min_p import MinPProcessor

SPECS: list[SamplerSpec] = []
plugin.pyagent_register_samplers(register=SPECS.append)


class TestMinPConformance(SamplerConformance):
    impl = MinPProcessor
    spec = next(s for s in SPECS if s.name == "min_p")
    request_params = ({"min_p": 0.05}, {"min_p": 0.5}, {"min_p": 1.0})
    disabled_params = ({}, {"min_p": 0.0})
    invalid_request_params = ({"min_p": -0.1}, {"min_p": 1.5}, {"min_p": math.nan}, {"min_p": "0.1"})


def processed(values: list[float], logits: torch.Tensor) -> torch.Tensor:
    processor = MinPProcessor({}, SamplerContext(logits.shape[1]))
    added = tuple(AddedRequest(r, {"min_p": v}) for r, v in enumerate(values))
    processor.update_state(BatchUpdate(len(values), added=added))
    return processor.apply(logits.clone())


@pytest.mark.parametrize("min_p", [0.01, 0.1, 0.5, 0.9])
def test_matches_transformers(min_p: float) -> None:
    logits = torch.randn(6, 500, generator=torch.Generator().manual_seed(int(min_p * 100))) * 3
    logits[0, :100] = -math.inf
    want = MinPLogitsWarper(min_p)(torch.zeros(6, 1, dtype=torch.long), logits.clone())
    assert torch.equal(processed([min_p] * 6, logits), want)


def test_matches_the_fused_kernel_bitwise() -> None:
    kernels = pytest.importorskip("pyagent_kernels.sampling")
    gen = torch.Generator().manual_seed(9)
    logits = torch.randn(50, 300, generator=gen) * 4
    values = torch.rand(50, generator=gen).tolist()
    values[:3] = [0.0, 1.0, 0.5]
    want = logits.clone()
    kernels.apply_sampling_mask(want, min_p=torch.tensor(values, dtype=torch.float32), backend="torch")
    assert torch.equal(processed(values, logits), want)
