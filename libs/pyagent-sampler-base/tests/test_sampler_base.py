"""The building blocks as a third-party author uses them: two small processors built on the bases
pass the core's conformance kit, and the parameter checks reject bad values with messages that name
the parameter, the value and what is allowed."""

from __future__ import annotations

import math
import sys
from collections.abc import Mapping
from typing import Any, ClassVar

import pytest
import torch

from pyagent_core import OptionSpec, SamplerSpec
from pyagent_core.interfaces.sampler import AddedRequest, BatchUpdate, SamplerContext
from pyagent_core.testing.sampler import SamplerConformance, run_processor
from pyagent_sampler_base.common_params import SEED, TEMPERATURE
from pyagent_sampler_base.logits_checks import check_logits, check_selectable
from pyagent_sampler_base.multi_param import MultiParamProcessor, ParamCheck, ParamRow
from pyagent_sampler_base.precision import working_dtype
from pyagent_sampler_base.request_params import RequestParam
from pyagent_sampler_base.row_param_processor import RowParamProcessor
from pyagent_sampler_base.token_params import (
    TokenBiasParam,
    TokenIdsParam,
    TokenSequencesParam,
    bias_items,
    check_in_vocab,
    split_sequences,
)

# The specs name their impl by module path; this file's own name (under a folder with a hyphen) is
# no importable path, so it is also reachable as MODULE.
MODULE = "pyagent_sampler_base_tests"
sys.modules.setdefault(MODULE, sys.modules[__name__])

SHIFT = RequestParam(name="shift", integer=False, min=-10.0, max=10.0, allowed="a number in [-10, 10] (0: off)")
FLOOR = RequestParam(name="floor", integer=False, min=0.0, allowed="a finite number >= 0 (0: off)")
BANNED = TokenIdsParam(name="banned")


class ShiftProcessor(RowParamProcessor):
    """Adds the row's ``shift`` to every logit (a processor of one parameter)."""

    request_param: ClassVar[RequestParam] = SHIFT
    neutral: ClassVar[Any] = 0.0

    def is_argmax_invariant(self) -> bool:
        return True

    def process(self, logits: torch.Tensor, values: list[Any]) -> torch.Tensor:
        return logits.add_(torch.tensor(values, dtype=logits.dtype).unsqueeze(1))


class FloorRow(ParamRow):
    """A row that counts how often it was processed (per-row state beyond the values)."""

    def __init__(self, request: AddedRequest, values: dict[str, Any]) -> None:
        super().__init__(request, values)
        self.calls = 0


class FloorProcessor(MultiParamProcessor):
    """Masks the ``banned`` tokens and every logit more than ``floor`` below the row's maximum (a
    processor of two parameters, with a check across the values and per-row state)."""

    request_params: ClassVar[tuple[ParamCheck, ...]] = (FLOOR, BANNED)
    neutral: ClassVar[Mapping[str, Any]] = {"floor": 0.0, "banned": ()}
    label: ClassVar[str] = "floor sampler"

    def check_values(self, values: Mapping[str, Any], where: str) -> None:
        check_in_vocab("banned", values["banned"], self.vocab_size, where)

    def make_row(self, request: AddedRequest, values: dict[str, Any]) -> FloorRow:
        return FloorRow(request, values)

    def is_argmax_invariant(self) -> bool:
        return False

    def is_active(self, values: Mapping[str, Any]) -> bool:
        return bool(values["floor"] > 0 or values["banned"])

    def process(self, logits: torch.Tensor, rows: list[int]) -> torch.Tensor:
        out = logits.to(working_dtype(logits), copy=True)
        for i, row in enumerate(rows):
            state = self.rows[row]
            state.calls += 1
            out[i, list(state.values["banned"])] = float("-inf")
            floor = state.values["floor"]
            if floor > 0 and bool(torch.isfinite(out[i]).any()):
                out[i] = out[i].masked_fill(out[i] < out[i].max() - floor, float("-inf"))
            if not bool(torch.isfinite(out[i]).any()):  # banned everything: keep the row as it was
                out[i] = logits[i]
        return out


class TestShiftProcessor(SamplerConformance):
    impl = ShiftProcessor
    spec = SamplerSpec(name="shift", impl=f"{MODULE}:ShiftProcessor", argmax_invariant=True,
                       options={"shift": OptionSpec(type=float, default=None)})
    request_params = ({"shift": 1.5}, {"shift": -10}, {"shift": 10.0})
    disabled_params = ({}, {"shift": 0})
    invalid_request_params = ({"shift": 11}, {"shift": "up"}, {"shift": math.nan}, {"shift": True})


class TestFloorProcessor(SamplerConformance):
    impl = FloorProcessor
    spec = SamplerSpec(name="floor", impl=f"{MODULE}:FloorProcessor", stage="truncation",
                       options={"floor": OptionSpec(type=float, default=None)})
    request_params = ({"floor": 2.0}, {"banned": [0, 5]}, {"floor": 0.5, "banned": [63]})
    disabled_params = ({}, {"floor": 0, "banned": []})
    invalid_request_params = ({"floor": -1.0}, {"banned": [-1]}, {"banned": [64]}, {"banned": "5"})


def test_request_values_fall_back_to_the_option_then_the_neutral_value() -> None:
    logits = torch.zeros(3, 4)
    out = run_processor(ShiftProcessor, logits, [{"shift": 2.0}, {}, {"shift": None}], options={"shift": -1.0})
    assert out[:, 0].tolist() == [2.0, -1.0, -1.0]
    assert run_processor(ShiftProcessor, logits[:1], [{}])[0].tolist() == [0.0] * 4


def test_options_are_checked_when_the_processor_is_built() -> None:
    with pytest.raises(ValueError, match=r"option of the shift sampler: shift=20 is invalid; shift must be"):
        ShiftProcessor({"shift": 20}, SamplerContext(8))
    with pytest.raises(ValueError, match=r"option of the floor sampler: banned holds token ids \[9\] outside"):
        FloorProcessor({"banned": [9]}, SamplerContext(8))


def test_per_row_state_moves_with_its_request_and_only_active_rows_are_processed() -> None:
    processor = FloorProcessor({}, SamplerContext(6))
    processor.update_state(BatchUpdate(2, added=(AddedRequest(0, {"floor": 1.0}), AddedRequest(1, {}))))
    processor.apply(torch.zeros(2, 6))
    processor.update_state(BatchUpdate(2, added=(AddedRequest(0, {}),), removed=(0,)))
    assert processor.active_rows() == []
    assert processor.leaves_batch_unchanged()
    processor.update_state(BatchUpdate(1, removed=(0,), added=(AddedRequest(0, {"banned": [1]}),)))
    logits = torch.arange(6.0).unsqueeze(0)
    assert processor.apply(logits.clone())[0, 1] == float("-inf")
    assert processor.rows[0].calls == 1


@pytest.mark.parametrize(("param", "value", "message"), [
    (SHIFT, 10.5, "here: shift=10.5 is invalid; shift must be a number in [-10, 10] (0: off)"),
    (SHIFT, math.inf, "here: shift=inf is invalid"),
    (TEMPERATURE, -0.5, "here: temperature=-0.5 is invalid; temperature must be a finite number >= 0"),
    (SEED, 2**64, "here: seed=18446744073709551616 is invalid; seed must be an integer in [0, 2**64 - 1]"),
    (SEED, 1.0, "here: seed=1.0 is invalid"),
    (BANNED, [1, -2], "here: banned=[1, -2] is invalid; banned must be a list of token ids"),
    (BANNED, "12", "here: banned='12' is invalid"),
    (TokenSequencesParam("stops"), [[1], []], "here: stops=[[1], []] is invalid; stops must be a list of non-empty"),
    (TokenSequencesParam("stops"), ["\n"], "here: stops=['\\n'] is invalid; stops must be a list of non-empty lists"),
    (TokenSequencesParam("breakers", text=True), ["\n", ""],
     "breakers must be a list of non-empty strings or non-empty lists of token ids"),
    (TokenBiasParam("logit_bias"), {3: 101}, "here: logit_bias={3: 101} is invalid; logit_bias must be a mapping"),
    (TokenBiasParam("logit_bias"), {"x": 1}, "to a bias in [-100, 100]"),
])
def test_parameter_checks_name_the_parameter_the_value_and_what_is_allowed(
    param: ParamCheck, value: Any, message: str
) -> None:
    with pytest.raises(ValueError) as error:
        param.validate(value, "here")
    assert message in str(error.value)
    param.validate(None, "here")  # unset is always valid


def test_text_sequences_accept_strings_and_id_lists_and_split_them() -> None:
    TokenSequencesParam("breakers", text=True).validate(["\n", [3, 4]], "here")
    assert split_sequences(["\n", [3, 4], "###"]) == (["\n", "###"], [(3, 4)])


def test_valid_values_pass_and_bias_keys_may_be_digit_strings() -> None:
    SEED.validate(2**64 - 1, "here")
    TEMPERATURE.validate(0, "here")
    BANNED.validate((0, 7), "here")
    TokenBiasParam("logit_bias").validate({"5": -100, 6: 2.5}, "here")
    assert bias_items({"5": -100, 6: 2.5}) == [(5, -100.0), (6, 2.5)]


def test_logits_checks_reject_what_a_sampler_cannot_use() -> None:
    check_logits(torch.zeros(2, 5), 5, "s", num_rows=2)
    for logits, message in [(torch.zeros(5), "must be 2-D"), (torch.zeros(2, 4), "vocab size 4 but the sampler was"),
                            (torch.zeros(2, 5, dtype=torch.int64), "floating-point"),
                            (torch.zeros(3, 5), "3 rows but the batch holds 2 requests")]:
        with pytest.raises(ValueError, match=message):
            check_logits(logits, 5, "s", num_rows=2)
    with pytest.raises(TypeError, match=r"torch\.Tensor"):
        check_logits([[0.0]], 1, "s")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"cannot choose a token in rows \[1\]"):
        check_selectable(torch.tensor([0.5, -math.inf]), "s")


def test_working_dtype_widens_half_precision_only() -> None:
    assert working_dtype(torch.zeros(1, dtype=torch.bfloat16)) == torch.float32
    assert working_dtype(torch.zeros(1, dtype=torch.float16)) == torch.float32
    assert working_dtype(torch.zeros(1, dtype=torch.float64)) == torch.float64
