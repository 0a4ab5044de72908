"""The gumbel selector: the conformance kit, seeded reproducibility across batches, C = torch."""

from __future__ import annotations

import math

import pytest
import torch

from pyagent_core.interfaces.sampler import AddedRequest, BatchUpdate, SamplerContext
from pyagent_core.testing.sampler import SamplerConformance
from pyagent_core.types import SamplerSpec
from pyagent_samplers_gumbel import plugin
from pyagent_samplers_gumbel.selector import GumbelSelector

SPECS: list[SamplerSpec] = []
plugin.pyagent_register_samplers(register=SPECS.append)


class TestGumbelConformance(SamplerConformance):
    impl = GumbelSelector
    spec = SPECS[0]
    request_params = ({"seed": 1}, {"seed": 2**64 - 1}, {"seed": 0})
    invalid_request_params = ({"seed": -1}, {"seed": 2**64}, {"seed": 1.5}, {"seed": True})


def draw(backend: str, seeds: list[int | None], steps: int, logits: torch.Tensor,
         option_seed: int = 3) -> list[list[int]]:
    selector = GumbelSelector({"backend": backend, "seed": option_seed}, SamplerContext(logits.shape[1]))
    added = tuple(AddedRequest(r, {"seed": s}) for r, s in enumerate(seeds))
    selector.update_state(BatchUpdate(len(seeds), added=added))
    return [selector.select(logits).tolist() for _ in range(steps)]


@pytest.mark.parametrize("backend", ["c", "torch"])
def test_seeded_request_is_independent_of_its_batch(backend: str) -> None:
    logits = torch.randn(3, 200, generator=torch.Generator().manual_seed(0))
    together = draw(backend, [11, 22, 33], 5, logits)
    alone = draw(backend, [22], 5, logits[1:2].contiguous())
    assert [step[1] for step in together] == [step[0] for step in alone]


def test_c_and_torch_choose_the_same_tokens() -> None:
    logits = torch.randn(4, 500, generator=torch.Generator().manual_seed(1)) * 2
    logits[0, 10:] = -math.inf
    assert draw("c", [1, None, 3, 2**63], 6, logits) == draw("torch", [1, None, 3, 2**63], 6, logits)


def test_masked_row_raises() -> None:
    logits = torch.full((1, 10), -math.inf)
    with pytest.raises(ValueError, match="only -inf"):
        draw("auto", [1], 1, logits)


@pytest.mark.parametrize("backend", ["c", "torch"])
def test_kept_tokens_from_the_fused_mask_change_nothing(backend: str) -> None:
    """The fused mask (top-k 20, then temperature 0.7, as a chain fuses them) records each row's kept
    tokens; selecting from them alone gives the tokens a scan of every row gives, step after step."""
    from pyagent_kernels.sampling import KeptTokens, SamplingParams

    vocab, seeds = 2000, [5, 6, None]
    added = tuple(AddedRequest(r, {"seed": s}) for r, s in enumerate(seeds))
    mask = SamplingParams(top_k=[20] * 3, temperature=[0.7] * 3, temperature_last=True)
    scanning, listing = (GumbelSelector({"backend": backend, "seed": 3}, SamplerContext(vocab)) for _ in range(2))
    for sampler in (scanning, listing):
        sampler.update_state(BatchUpdate(3, added=added))
    kept = KeptTokens()
    for step in range(4):
        masked = torch.randn(3, vocab, generator=torch.Generator().manual_seed(step)) * 3
        mask.apply(masked, kept=kept, backend=backend)
        assert kept.matches(masked)
        assert torch.equal(listing.select(masked, kept=kept), scanning.select(masked))
