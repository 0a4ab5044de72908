"""The conformance kit run against dry, xtc and mirostat."""

from __future__ import annotations

from pyagent_core.testing.sampler import SamplerConformance, registered_sampler_specs
from pyagent_samplers_llamacpp import plugin
from pyagent_samplers_llamacpp.dry import DryProcessor
from pyagent_samplers_llamacpp.mirostat import MirostatProcessor
from pyagent_samplers_llamacpp.xtc import XtcProcessor

SPECS = registered_sampler_specs(plugin.pyagent_register_samplers)


class TestDry(SamplerConformance):
    impl = DryProcessor
    spec = SPECS["dry"]
    request_params = (
        {"dry_multiplier": 0.8},
        {"dry_multiplier": 2.0, "dry_base": 1.1, "dry_allowed_length": 1, "dry_penalty_last_n": 4},
        {"dry_multiplier": 1.0, "dry_allowed_length": 1, "dry_sequence_breakers": [[3], [5, 6]]},
    )
    disabled_params = ({}, {"dry_multiplier": 0.0}, {"dry_multiplier": 1.0, "dry_penalty_last_n": 0})
    invalid_request_params = (
        {"dry_multiplier": -1.0}, {"dry_base": 0.5}, {"dry_allowed_length": 0}, {"dry_allowed_length": 1.5},
        {"dry_penalty_last_n": -2}, {"dry_sequence_breakers": [[]]}, {"dry_sequence_breakers": "\n"},
        {"dry_sequence_breakers": [[64]]},
    )


class TestXtc(SamplerConformance):
    impl = XtcProcessor
    spec = SPECS["xtc"]
    request_params = (
        {"xtc_probability": 1.0, "xtc_threshold": 0.05, "seed": 1},
        {"xtc_probability": 0.5, "xtc_threshold": 0.1, "seed": 2},
        {"xtc_probability": 1.0, "xtc_threshold": 0.0, "seed": 3},
    )
    disabled_params = ({}, {"xtc_probability": 0.0}, {"xtc_probability": 1.0, "xtc_threshold": 0.6})
    invalid_request_params = (
        {"xtc_probability": 1.5}, {"xtc_probability": -0.1}, {"xtc_threshold": 2.0}, {"seed": -1},
    )


class TestMirostat(SamplerConformance):
    impl = MirostatProcessor
    spec = SPECS["mirostat"]
    request_params = (
        {"mirostat": 2}, {"mirostat": 2, "mirostat_tau": 1.0, "mirostat_eta": 0.5},
        {"mirostat": 1}, {"mirostat": 1, "mirostat_tau": 2.0},
    )
    disabled_params = ({}, {"mirostat": 0})
    invalid_request_params = (
        {"mirostat": 3}, {"mirostat": 1.0}, {"mirostat_tau": -1.0}, {"mirostat_eta": float("nan")},
    )
