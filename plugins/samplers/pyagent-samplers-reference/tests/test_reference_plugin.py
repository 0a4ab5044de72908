"""The plugin module, its entry point and specs, and the validation of options and request params."""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys

import pluggy
import pytest
import torch

from pyagent_core import hookspecs
from pyagent_core.errors import OptionError
from pyagent_core.interfaces.sampler import AddedRequest, BatchUpdate, LogitsProcessor, SamplerContext, TokenSelector
from pyagent_core.lazy import import_impl
from pyagent_core.options import validate_options
from pyagent_core.types import SamplerSpec
from pyagent_samplers_reference import plugin
from pyagent_samplers_reference.temperature import TemperatureProcessor
from pyagent_samplers_reference.top_k import TopKProcessor
from pyagent_samplers_reference.top_p import TopPProcessor


def registered() -> dict[str, SamplerSpec]:
    """The specs the plugin registers through pluggy, by name."""
    manager = pluggy.PluginManager(hookspecs.PROJECT)
    manager.add_hookspecs(hookspecs)
    manager.register(plugin)
    specs: list[SamplerSpec] = []
    manager.hook.pyagent_register_samplers(register=specs.append)
    return {spec.name: spec for spec in specs}


def test_entry_point_names_the_plugin_module() -> None:
    points = importlib.metadata.entry_points(group="pyagent")
    declared = {(point.name, point.value) for point in points}
    assert ("samplers-reference", "pyagent_samplers_reference.plugin") in declared


def test_registers_the_six_samplers() -> None:
    specs = registered()
    assert sorted(specs) == ["greedy", "min_p", "multinomial", "temperature", "top_k", "top_p"]
    assert {n for n, s in specs.items() if s.selects_token} == {"greedy", "multinomial"}
    assert {n for n, s in specs.items() if s.argmax_invariant} == {"temperature", "top_k", "top_p", "min_p"}
    for spec in specs.values():
        assert spec.requires == ("torch",) and spec.summary and spec.install_hint


def test_impls_resolve_to_the_right_interface() -> None:
    for spec in registered().values():
        impl = import_impl(spec.impl)
        assert issubclass(impl, TokenSelector if spec.selects_token else LogitsProcessor), spec.name


def test_listing_imports_neither_torch_nor_implementations() -> None:
    code = (
        "import sys, pyagent_samplers_reference.plugin as p; specs = []; "
        "p.pyagent_register_samplers(register=specs.append); "
        "loaded = [m for m in sys.modules if m == 'torch' or m.startswith('pyagent_samplers_reference.')]; "
        "print(sorted(loaded))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "['pyagent_samplers_reference.plugin']"


def test_option_defaults_and_ranges() -> None:
    specs = registered()
    defaults = {name: validate_options(spec.options, {}, name) for name, spec in specs.items()}
    assert defaults == {
        "temperature": {"temperature": 1.0}, "top_k": {"top_k": 0}, "top_p": {"top_p": 1.0}, "min_p": {"min_p": 0.0},
        "greedy": {}, "multinomial": {"seed": None},
    }
    assert validate_options(specs["top_k"].options, {"top_k": "40"}, "top_k") == {"top_k": 40}
    out_of_range: list[tuple[str, dict[str, float]]] = [
        ("top_p", {"top_p": 1.5}), ("top_k", {"top_k": -1}), ("temperature", {"temperature": -1}),
        ("multinomial", {"seed": 2**64}), ("min_p", {"min_p": -0.1}),
    ]
    for name, bad in out_of_range:
        with pytest.raises(OptionError):
            validate_options(specs[name].options, bad, name)


def test_non_finite_temperature_option_is_rejected() -> None:
    with pytest.raises(ValueError, match="option of the temperature sampler: temperature=nan is invalid"):
        TemperatureProcessor({"temperature": float("nan")}, SamplerContext(8))


@pytest.mark.parametrize(("processor_type", "params", "message"), [
    (TopKProcessor, {"top_k": -1},
     "request at row 1: top_k=-1 is invalid; top_k must be an integer >= 0 (0 turns top-k off)"),
    (TopPProcessor, {"top_p": 1.5},
     "request at row 1: top_p=1.5 is invalid; top_p must be a number in [0, 1]"),
    (TemperatureProcessor, {"temperature": -2.0},
     "request at row 1: temperature=-2.0 is invalid; temperature must be a finite number >= 0"),
])
def test_invalid_request_param_is_rejected_and_rows_stay_as_they_were(
    processor_type: type[LogitsProcessor], params: dict[str, float], message: str
) -> None:
    processor = processor_type({}, SamplerContext(8))
    processor.update_state(BatchUpdate(1, added=(AddedRequest(0, {}),)))
    before = list(processor.rows.states)
    bad = BatchUpdate(2, removed=(0,), added=(AddedRequest(0, {}), AddedRequest(1, params)))
    with pytest.raises(ValueError) as error:
        processor.update_state(bad)
    assert str(error.value).startswith(message)
    assert processor.rows.states == before


def test_processor_rejects_logits_whose_rows_do_not_match_the_batch() -> None:
    processor = TopKProcessor({}, SamplerContext(8))
    processor.update_state(BatchUpdate(2, added=(AddedRequest(0, {"top_k": 2}), AddedRequest(1, {}))))
    with pytest.raises(ValueError, match="logits have 3 rows but the batch holds 2 requests"):
        processor.apply(torch.zeros(3, 8))
