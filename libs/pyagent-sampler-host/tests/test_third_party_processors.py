"""A third party's samplers take part in the default chain and in fusion through their declarations.

The processors below live in this test module, not in any installed distribution, and are registered
through a hookimpl object passed to ``Registry(plugins=[...])``, next to the installed plugins:

- ``tp_top_k``, a top-k written against the core alone, implements ``FusableMaskStep``: the host's
  chain runs it inside the fused mask kernel call (its ``apply`` is never called) and the selector
  gets the kernel's result;
- ``tp_shift`` (``sampler_host_doubles.SHIFT``) does not implement it, and declares the ``penalties``
  stage at position 15: the default chain places it between ``penalties`` (10) and ``dry`` (20);
- ``tp_unknown_step`` declares a fused-mask step that does not exist, and ``tp_unavailable`` a stage
  but a requirement that is not installed (the default chain leaves it out).
"""

from __future__ import annotations

import pytest
import torch
from sampler_host_doubles import SHIFT, Req, ThirdPartyTopK, describe
from sampler_host_doubles import registry as registry_with

from pyagent_core.errors import ConfigError
from pyagent_core.interfaces.sampler import (
    FusableMaskStep,
)
from pyagent_core.registry import Registry, get_registry
from pyagent_core.testing.sampler import SamplerConformance
from pyagent_core.types import SamplerSpec
from pyagent_sampler_host import fused_mask
from pyagent_sampler_host.chain import Chain
from pyagent_sampler_host.fused_mask import fused_runs
from pyagent_sampler_host.host import SamplerHost

VOCAB = 500


TOP_K_SPEC = SamplerSpec(name="tp_top_k", impl="sampler_host_doubles:ThirdPartyTopK", argmax_invariant=True,
                         stage="truncation", position=25, summary="A third party's top-k.")
SPECS = (
    TOP_K_SPEC,
    SHIFT,
    SamplerSpec(name="tp_unknown_step", impl="sampler_host_doubles:UnknownStep", argmax_invariant=True),
    SamplerSpec(name="tp_unavailable", impl=SHIFT.impl, argmax_invariant=True,
                stage="truncation", requires=("pyagent-no-such-distribution>=1",)),
)


def registry() -> Registry:
    """The installed plugins plus the third party's."""
    return registry_with(*SPECS)


class TestThirdPartyTopK(SamplerConformance):
    """The kit's checks, the fused-mask one included, pass for the third party's top-k."""

    impl = ThirdPartyTopK
    spec = TOP_K_SPEC
    request_params = ({"top_k": 1}, {"top_k": 5}, {"top_k": 40}, {"top_k": 1000})
    disabled_params = ({"top_k": 0}, {})
    invalid_request_params = ({"top_k": -1}, {"top_k": 2.5})


def test_a_third_party_fusable_processor_is_fused_by_the_chain() -> None:
    if fused_mask._mask_kernel() is None:
        pytest.skip("pyagent_kernels._C is not built")
    from pyagent_kernels.sampling import apply_sampling_mask

    host = SamplerHost(registry(), VOCAB, "tp_top_k,top_p,temperature", describe=describe)
    chain = host.chain
    top_k = chain.processors[0]
    assert isinstance(top_k, ThirdPartyTopK) and isinstance(top_k, FusableMaskStep)
    assert [len(run) for run in fused_runs(chain.processors)] == [3]
    seen: list[torch.Tensor] = []
    select = host.selector.select

    def recording_select(logits: torch.Tensor) -> torch.Tensor:
        seen.append(logits.clone())
        return select(logits)

    host.selector.select = recording_select  # type: ignore[method-assign]
    requests = [Req({"temperature": t, "top_k": k, "top_p": p, "seed": i})
                for i, (t, k, p) in enumerate([(0.7, 20, 0.9), (1.3, 3, 1.0), (1.0, 0, 0.5), (0.5, 499, 0.95)])]
    logits = torch.randn(len(requests), VOCAB, generator=torch.Generator().manual_seed(0)) * 3
    for step in range(2):
        host.sample(requests, logits + step)
        expected = logits + step
        apply_sampling_mask(expected, top_k=torch.tensor([20, 3, 0, 499], dtype=torch.int32),
                            top_p=torch.tensor([0.9, 1.0, 0.5, 0.95]), temperature=torch.tensor([0.7, 1.3, 1.0, 0.5]),
                            temperature_last=True)
        assert torch.equal(seen[-1], expected), f"step {step}: the selector did not get the fused kernel's result"
    assert top_k.apply_calls == 0, "the chain called the fusable processor's apply instead of fusing it"


def test_a_third_party_processor_is_placed_in_the_default_chain_by_its_stage() -> None:
    installed = ",".join(Chain(get_registry(), VOCAB).names)  # test_chain_order pins it
    chain = Chain(registry(), VOCAB)
    expected = installed.replace("penalties,dry", "penalties,tp_shift,dry").replace(
        "top_k,typical", "top_k,tp_top_k,typical")
    assert ",".join(chain.names) == expected
    assert "tp_unknown_step" not in chain.names  # no stage: only in chains that name it
    assert chain.skipped == ("tp_unavailable",)  # a stage, but its requirement is not installed
    shift = chain.processors[chain.names.index("tp_shift")]
    assert not isinstance(shift, FusableMaskStep)
    assert [shift] in fused_runs(chain.processors)


def test_a_processor_that_declares_an_unknown_mask_step_is_refused_when_the_chain_is_built() -> None:
    with pytest.raises(ConfigError, match=r"mask_step='top_a'.*temperature, top_k, top_p, min_p"):
        Chain(registry(), VOCAB, "tp_unknown_step")
