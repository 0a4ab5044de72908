"""A third party's samplers take part in the default chain and in fusion through their declarations.

The processors below live in this test module, not in any installed distribution, and are registered
through a hookimpl object passed to ``Registry(plugins=[...])``, next to the installed plugins:

- ``tp_top_k``, a top-k written against the core alone, implements ``FusableMaskStep``: the engine's
  chain runs it inside the fused mask kernel call (its ``apply`` is never called) and the selector
  gets the kernel's result;
- ``tp_shift`` does not implement it, and declares the ``penalties`` stage at position 15: the
  default chain places it between ``penalties`` (10) and ``dry`` (20);
- ``tp_unknown_step`` declares a fused-mask step that does not exist, and ``tp_unavailable`` a stage
  but a requirement that is not installed (the default chain leaves it out).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import pytest
import torch

from pyagent_core import hookimpl
from pyagent_core.errors import ConfigError
from pyagent_core.interfaces.sampler import (
    AddedRequest,
    BatchUpdate,
    FusableMaskStep,
    LogitsProcessor,
    SamplerContext,
)
from pyagent_core.registry import Registry, get_registry
from pyagent_core.testing.sampler import SamplerConformance
from pyagent_core.types import SamplerSpec
from pyagent_engine.requests.params import SamplingParams
from pyagent_engine.requests.request import Request
from pyagent_engine.sampling import fused_mask
from pyagent_engine.sampling.chain import SamplerChain
from pyagent_engine.sampling.fused_mask import fused_runs

VOCAB = 500


class ThirdPartyTopK(LogitsProcessor):
    """Keeps each row's ``top_k`` largest logits (and those tied with the k-th); 0 turns it off.

    One step of the fused mask: ``mask_step`` and ``row_values`` are all it takes. It counts the
    calls of :meth:`apply`, so a test can tell whether a chain ran it or the kernel did.
    """

    mask_step = "top_k"

    def __init__(self, options: Mapping[str, Any], context: SamplerContext) -> None:
        super().__init__(options, context)
        self.apply_calls = 0
        self._values: list[int] | None = None

    def row_state(self, request: AddedRequest) -> AddedRequest:
        k = request.params.get("top_k")
        if k is not None and (isinstance(k, bool) or not isinstance(k, int) or k < 0):
            raise ValueError(f"request at row {request.index}: top_k={k!r} is invalid; use an integer >= 0")
        return request

    def update_state(self, update: BatchUpdate | None) -> None:
        super().update_state(update)
        if update is not None:
            self._values = None

    def row_values(self) -> list[int]:
        if self._values is None:
            self._values = [int(self.param(row, "top_k", 0)) for row in range(len(self.rows))]
        return self._values

    def is_argmax_invariant(self) -> bool:
        return True

    def leaves_batch_unchanged(self) -> bool:
        return all(k <= 0 or k >= self.vocab_size for k in self.row_values())

    def apply(self, logits: torch.Tensor) -> torch.Tensor:
        self.apply_calls += 1
        if logits.ndim != 2 or tuple(logits.shape) != (len(self.rows), self.vocab_size):
            raise ValueError(f"tp_top_k: logits of shape {tuple(logits.shape)}; expected "
                             f"[{len(self.rows)}, {self.vocab_size}]")
        for row, k in enumerate(self.row_values()):
            if 0 < k < self.vocab_size:
                kth = torch.topk(logits[row], k).values[-1]
                logits[row].masked_fill_(logits[row] < kth, float("-inf"))
        return logits


class ThirdPartyShift(LogitsProcessor):
    """Adds the request's ``shift`` to every logit of its row (0 turns it off); not fusable."""

    def is_argmax_invariant(self) -> bool:
        return True

    def leaves_batch_unchanged(self) -> bool:
        return all(self.param(row, "shift", 0.0) == 0 for row in range(len(self.rows)))

    def apply(self, logits: torch.Tensor) -> torch.Tensor:
        shifts = [float(self.param(row, "shift", 0.0)) for row in range(len(self.rows))]
        return logits.add_(torch.tensor(shifts, dtype=logits.dtype).unsqueeze(1))


class UnknownStep(ThirdPartyShift):
    """Claims a fused-mask step the kernel does not have."""

    mask_step = "top_a"

    def row_values(self) -> list[float]:
        return [0.0] * len(self.rows)


TOP_K_SPEC = SamplerSpec(name="tp_top_k", impl=f"{__name__}:ThirdPartyTopK", argmax_invariant=True,
                         stage="truncation", position=25, summary="A third party's top-k.")
SPECS = (
    TOP_K_SPEC,
    SamplerSpec(name="tp_shift", impl=f"{__name__}:ThirdPartyShift", argmax_invariant=True,
                stage="penalties", position=15),
    SamplerSpec(name="tp_unknown_step", impl=f"{__name__}:UnknownStep", argmax_invariant=True),
    SamplerSpec(name="tp_unavailable", impl=f"{__name__}:ThirdPartyShift", argmax_invariant=True,
                stage="truncation", requires=("pyagent-no-such-distribution>=1",)),
)


class ThirdPartyPlugin:
    """The hookimpl object a third-party distribution's entry point would name."""

    @hookimpl
    def pyagent_register_samplers(self, register: Callable[[SamplerSpec], None]) -> None:
        for spec in SPECS:
            register(spec)


def registry() -> Registry:
    """The installed plugins plus the third party's."""
    return Registry(plugins=[("third-party-samplers", ThirdPartyPlugin())]).load_plugins()


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

    chain = SamplerChain(registry(), VOCAB, "tp_top_k,top_p,temperature")
    top_k = chain.processors[0]
    assert isinstance(top_k, ThirdPartyTopK) and isinstance(top_k, FusableMaskStep)
    assert [len(run) for run in fused_runs(chain.processors)] == [3]
    seen: list[torch.Tensor] = []
    select = chain.random.select

    def recording_select(logits: torch.Tensor) -> torch.Tensor:
        seen.append(logits.clone())
        return select(logits)

    chain.random.select = recording_select
    requests = [Request(f"r{i}", [1, 2, 3], SamplingParams(temperature=t, top_k=k, top_p=p, seed=i))
                for i, (t, k, p) in enumerate([(0.7, 20, 0.9), (1.3, 3, 1.0), (1.0, 0, 0.5), (0.5, 499, 0.95)])]
    logits = torch.randn(len(requests), VOCAB, generator=torch.Generator().manual_seed(0)) * 3
    for step in range(2):
        chain.sample(requests, logits + step)
        expected = logits + step
        apply_sampling_mask(expected, top_k=torch.tensor([20, 3, 0, 499], dtype=torch.int32),
                            top_p=torch.tensor([0.9, 1.0, 0.5, 0.95]), temperature=torch.tensor([0.7, 1.3, 1.0, 0.5]),
                            temperature_last=True)
        assert torch.equal(seen[-1], expected), f"step {step}: the selector did not get the fused kernel's result"
    assert top_k.apply_calls == 0, "the chain called the fusable processor's apply instead of fusing it"


def test_a_third_party_processor_is_placed_in_the_default_chain_by_its_stage() -> None:
    installed = ",".join(SamplerChain(get_registry(), VOCAB).names)  # test_sampler_chain_order pins it
    chain = SamplerChain(registry(), VOCAB)
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
        SamplerChain(registry(), VOCAB, "tp_unknown_step")
