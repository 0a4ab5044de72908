"""The sampler conformance kit passes correct samplers and fails deliberately broken ones."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs
import pytest
import torch

from pyagent_core import OptionSpec, SamplerSpec
from pyagent_core.interfaces.sampler import (
    AddedRequest,
    BatchUpdate,
    LogitsProcessor,
    SamplerContext,
    TokenSelector,
)
from pyagent_core.testing.sampler import SamplerConformance


class ShiftProcessor(LogitsProcessor):
    """A correct processor: adds the request's ``shift`` (a number in [-10, 10]) to its row."""

    def row_state(self, request: AddedRequest) -> AddedRequest:
        value = request.params.get("shift", 0.0)
        if isinstance(value, bool) or not isinstance(value, int | float) or not -10 <= value <= 10:
            raise ValueError(f"{request.where}: shift={value!r} must be a number in [-10, 10]")
        return request

    def is_argmax_invariant(self) -> bool:
        return True

    def check(self, logits: torch.Tensor) -> None:
        if logits.ndim != 2 or logits.shape[1] != self.vocab_size or logits.shape[0] != len(self.rows):
            raise ValueError(
                f"expected logits of shape [{len(self.rows)}, {self.vocab_size}], got {tuple(logits.shape)}"
            )

    def shifts(self, logits: torch.Tensor) -> torch.Tensor:
        values = [[self.param(row, "shift", 0.0)] for row in range(len(self.rows))]
        return torch.tensor(values, dtype=logits.dtype, device=logits.device).reshape(-1, 1)

    def leaves_batch_unchanged(self) -> bool:
        return all(self.param(row, "shift", 0.0) == 0 for row in range(len(self.rows)))

    def apply(self, logits: torch.Tensor) -> torch.Tensor:
        self.check(logits)
        return logits.add_(self.shifts(logits))


class NeverSkippable(ShiftProcessor):
    """Broken: never lets the engine skip it, even when every row is disabled."""

    def leaves_batch_unchanged(self) -> bool:
        return False


class ClaimsUnchanged(ShiftProcessor):
    """Broken: says it leaves every batch unchanged, but shifts rows."""

    def leaves_batch_unchanged(self) -> bool:
        return True


class RowDependentShift(ShiftProcessor):
    """Broken: the result depends on the request's row."""

    def shifts(self, logits: torch.Tensor) -> torch.Tensor:
        rows = torch.arange(len(self.rows), dtype=logits.dtype, device=logits.device).unsqueeze(1)
        return super().shifts(logits) + rows


class ForgetsMovesShift(ShiftProcessor):
    """Broken: ignores the moves and swaps of a batch update."""

    def update_state(self, update: BatchUpdate | None) -> None:
        super().update_state(None if update is None else attrs.evolve(update, moved=()))


class NaNShift(ShiftProcessor):
    """Broken: writes NaN."""

    def apply(self, logits: torch.Tensor) -> torch.Tensor:
        out = super().apply(logits)
        out[:, 0] = float("nan")
        return out


class MasksEverything(ShiftProcessor):
    """Broken: leaves no finite logit."""

    def apply(self, logits: torch.Tensor) -> torch.Tensor:
        return super().apply(logits).fill_(float("-inf"))


class ChangesDtype(ShiftProcessor):
    """Broken: returns float32 whatever the input dtype."""

    def apply(self, logits: torch.Tensor) -> torch.Tensor:
        return super().apply(logits).float()


class TouchesDisabledRows(ShiftProcessor):
    """Broken: changes rows whose shift of 0 disables it."""

    def shifts(self, logits: torch.Tensor) -> torch.Tensor:
        return super().shifts(logits) + 0.25


class NegatesLogits(ShiftProcessor):
    """Broken: claims argmax invariance but reverses the order."""

    def apply(self, logits: torch.Tensor) -> torch.Tensor:
        return super().apply(logits).neg_()


class SkipsInputChecks(ShiftProcessor):
    """Broken: accepts logits of any shape (broadcasting hides the mistake)."""

    def check(self, logits: torch.Tensor) -> None:
        return None


class SkipsParamChecks(ShiftProcessor):
    """Broken: accepts any shift."""

    def row_state(self, request: AddedRequest) -> AddedRequest:
        return request


class VagueParamError(ShiftProcessor):
    """Broken: rejects a bad shift without naming it."""

    def row_state(self, request: AddedRequest) -> AddedRequest:
        try:
            return super().row_state(request)
        except ValueError:
            raise ValueError("bad request") from None


class ArgmaxSelector(TokenSelector):
    """A correct selector: the first largest logit of each row."""

    def select(self, logits: torch.Tensor) -> torch.Tensor:
        if logits.ndim != 2 or logits.shape[1] != self.vocab_size:
            raise ValueError(f"expected logits [rows, {self.vocab_size}], got {tuple(logits.shape)}")
        return logits.argmax(dim=1)


class Int32Selector(ArgmaxSelector):
    """Broken: returns int32 ids."""

    def select(self, logits: torch.Tensor) -> torch.Tensor:
        return super().select(logits).int()


class ArgminSelector(ArgmaxSelector):
    """Broken: chooses the least likely token, masked ones included."""

    def select(self, logits: torch.Tensor) -> torch.Tensor:
        return super().select(-logits)


class SharedGeneratorSelector(ArgmaxSelector):
    """Broken: one generator for the whole batch, so a seeded request's draws depend on the batch."""

    def __init__(self, options: Mapping[str, Any], context: SamplerContext) -> None:
        super().__init__(options, context)
        self.generator = torch.Generator().manual_seed(0)

    def select(self, logits: torch.Tensor) -> torch.Tensor:
        super().select(logits)
        return torch.multinomial(logits.softmax(dim=1), 1, generator=self.generator).squeeze(1)


class MinPStep(ShiftProcessor):
    """A correct fused-mask step: min-p over the request's ``min_p`` (a number in [0, 1]; 0 turns it off)."""

    mask_step = "min_p"

    def __init__(self, options: Mapping[str, Any], context: SamplerContext) -> None:
        super().__init__(options, context)
        self.values: list[float] | None = None

    def row_state(self, request: AddedRequest) -> AddedRequest:
        value = request.params.get("min_p", 0.0)
        if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 1:
            raise ValueError(f"{request.where}: min_p={value!r} must be a number in [0, 1]")
        return request

    def update_state(self, update: BatchUpdate | None) -> None:
        super().update_state(update)
        if update is not None:
            self.values = None

    def row_values(self) -> list[float]:
        if self.values is None:
            self.values = [float(self.param(row, "min_p", 0.0)) for row in range(len(self.rows))]
        return self.values

    def leaves_batch_unchanged(self) -> bool:
        return not any(self.row_values())

    def apply(self, logits: torch.Tensor) -> torch.Tensor:
        self.check(logits)
        q = torch.tensor(self.row_values(), dtype=torch.float32).double().unsqueeze(1)
        row_max = logits.amax(dim=1, keepdim=True).double()
        remove = (logits.double() - row_max < q.log()) & (q > 0) & torch.isfinite(row_max)
        return logits.masked_fill_(remove, float("-inf"))


class MinPStrictStep(MinPStep):
    """Broken: removes the tokens at exactly ``min_p * max_prob`` too (``>`` where the step keeps ``>=``),
    and keeps the tokens a little below it."""

    def apply(self, logits: torch.Tensor) -> torch.Tensor:
        self.check(logits)
        q = torch.tensor(self.row_values(), dtype=torch.float64).unsqueeze(1) * 0.5
        row_max = logits.amax(dim=1, keepdim=True).double()
        remove = (logits.double() - row_max <= q.log()) & (q > 0)
        return logits.masked_fill_(remove, float("-inf"))


class StaleValuesStep(MinPStep):
    """Broken: keeps the first batch's row values after the batch changes."""

    def update_state(self, update: BatchUpdate | None) -> None:
        ShiftProcessor.update_state(self, update)


class MisnamedStep(MinPStep):
    """Broken: declares a step the fused mask does not have."""

    mask_step = "min-p"


MIN_P_KIT = {
    "request_params": ({"min_p": 0.05}, {"min_p": 0.3}, {"min_p": 1.0}),
    "disabled_params": ({}, {"min_p": 0.0}),
    "invalid_request_params": ({"min_p": 1.5}, {"min_p": "high"}),
}


PROCESSOR_KIT = {
    "request_params": ({"shift": 1.5}, {"shift": -3.0}, {"shift": 10}),
    "disabled_params": ({}, {"shift": 0}),
    "invalid_request_params": ({"shift": 100}, {"shift": "up"}),
}


def make_kit(impl: type, *, selects_token: bool = False, argmax_invariant: bool = True,
             **attributes: Any) -> SamplerConformance:
    """An instance of a kit subclass that checks ``impl`` (defined in this module)."""
    spec = SamplerSpec(
        name=impl.__name__.lower(),
        impl=f"{__name__}:{impl.__name__}",
        options={} if selects_token else {"shift": OptionSpec(type=float, default=0.0, request=True)},
        argmax_invariant=argmax_invariant,
        stage="select" if selects_token else None,
    )
    defaults = {} if selects_token else PROCESSOR_KIT
    kit_class = type(f"Kit{impl.__name__}", (SamplerConformance,), {
        "impl": impl, "spec": spec, **defaults, **attributes,
    })
    return kit_class()


def kit_checks(kit: SamplerConformance) -> list[str]:
    """The names of every check of ``kit``."""
    return sorted(name for name in dir(kit) if name.startswith("test_"))


def run_every_check(kit: SamplerConformance) -> list[str]:
    """Run every check of ``kit``; return the names of the checks it skipped."""
    skipped = []
    for name in kit_checks(kit):
        try:
            getattr(kit, name)()
        except pytest.skip.Exception:
            skipped.append(name)
    return skipped


def test_kit_passes_a_correct_processor() -> None:
    skipped = run_every_check(make_kit(ShiftProcessor))
    assert all("selector" in name or "fusable" in name for name in skipped), skipped


def test_kit_passes_a_correct_fused_mask_step() -> None:
    skipped = run_every_check(make_kit(MinPStep, **MIN_P_KIT))
    assert all("selector" in name for name in skipped), skipped


@pytest.mark.parametrize(("impl", "message"), [
    (MinPStrictStep, "apply differs from the min_p step of the fused mask"),
    (StaleValuesStep, r"row_values\(\) gave \d+ values for a batch of \d+ rows"),
    (MisnamedStep, "mask_step='min-p'; a fused-mask step is one of temperature, top_k, top_p, min_p"),
])
def test_kit_fails_a_processor_whose_apply_is_not_the_step_it_declares(impl: type, message: str) -> None:
    kit = make_kit(impl, **MIN_P_KIT)
    with pytest.raises(AssertionError, match=message):
        kit.test_processor_fusable_mask_step_matches_apply()


def test_kit_passes_a_correct_selector() -> None:
    skipped = run_every_check(make_kit(ArgmaxSelector, selects_token=True, argmax_invariant=False))
    assert all("processor" in name or "invalid_request_params" in name for name in skipped), skipped


@pytest.mark.parametrize(("impl", "check"), [
    (RowDependentShift, "test_results_do_not_depend_on_row_or_batch"),
    (ForgetsMovesShift, "test_results_do_not_depend_on_row_or_batch"),
    (NaNShift, "test_processor_output_has_no_nan"),
    (MasksEverything, "test_processor_keeps_a_finite_logit_per_row"),
    (ChangesDtype, "test_processor_keeps_shape_and_dtype"),
    (TouchesDisabledRows, "test_processor_leaves_disabled_rows_unchanged"),
    (NeverSkippable, "test_processor_reports_disabled_batches_as_unchanged"),
    (ClaimsUnchanged, "test_processor_claims_unchanged_only_when_it_is"),
    (NegatesLogits, "test_processor_keeps_argmax_when_declared_invariant"),
    (SkipsInputChecks, "test_rejects_logits_of_wrong_ndim"),
    (SkipsInputChecks, "test_rejects_logits_of_wrong_vocab_size"),
    (SkipsParamChecks, "test_rejects_invalid_request_params"),
    (VagueParamError, "test_rejects_invalid_request_params"),
])
def test_kit_fails_a_broken_processor(impl: type, check: str) -> None:
    kit = make_kit(impl)
    with pytest.raises(AssertionError):
        getattr(kit, check)()


def test_kit_fails_a_processor_whose_spec_misdeclares_argmax_invariance() -> None:
    kit = make_kit(ShiftProcessor, argmax_invariant=False)
    with pytest.raises(AssertionError, match="argmax_invariant=False"):
        kit.test_processor_argmax_invariance_matches_spec()


def test_kit_fails_a_processor_declared_as_selector() -> None:
    kit = make_kit(ShiftProcessor, selects_token=True)
    with pytest.raises(AssertionError, match="not a TokenSelector"):
        kit.test_impl_is_processor_or_selector_as_declared()


@pytest.mark.parametrize(("impl", "check"), [
    (Int32Selector, "test_selector_returns_int64_ids_in_vocab"),
    (ArgminSelector, "test_selector_returns_int64_ids_in_vocab"),
    (ArgminSelector, "test_selector_chooses_the_only_finite_logit"),
    (SharedGeneratorSelector, "test_results_do_not_depend_on_row_or_batch"),
])
def test_kit_fails_a_broken_selector(impl: type, check: str) -> None:
    kit = make_kit(impl, selects_token=True, argmax_invariant=False,
                   request_params=({"seed": 1}, {"seed": 2}, {"seed": 3}))
    with pytest.raises(AssertionError):
        getattr(kit, check)()



def test_kit_fails_a_processor_that_refuses_a_parameter_its_spec_declares() -> None:
    """A spec whose request=True option's default (here 50) the processor refuses: hosts would offer a
    flag and a request field that can never be used as declared."""
    kit = make_kit(ShiftProcessor)
    spec = kit.spec
    kit.spec = SamplerSpec(name=spec.name, impl=spec.impl, argmax_invariant=True,
                           options={"shift": OptionSpec(type=float, default=50.0, request=True)})
    with pytest.raises(AssertionError, match=r"declares the per-request parameter 'shift'.*shift=50.0, its default"):
        kit.test_declared_request_params_are_accepted_at_their_defaults()
