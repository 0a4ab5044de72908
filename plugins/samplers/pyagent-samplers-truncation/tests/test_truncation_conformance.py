"""The conformance kit run against every truncation sampler."""

from __future__ import annotations

from pyagent_core.testing.sampler import SamplerConformance, registered_sampler_specs
from pyagent_samplers_truncation import plugin
from pyagent_samplers_truncation.cutoffs import EpsilonProcessor, EtaProcessor
from pyagent_samplers_truncation.dynatemp import DynamicTemperatureProcessor
from pyagent_samplers_truncation.top_n_sigma import TopNSigmaProcessor
from pyagent_samplers_truncation.typical import TypicalProcessor

SPECS = registered_sampler_specs(plugin.pyagent_register_samplers)
BAD_NUMBERS = (-0.1, float("nan"), float("inf"), "0.5", True)


class TestTypical(SamplerConformance):
    impl = TypicalProcessor
    spec = SPECS["typical"]
    request_params = ({"typical_p": 0.0}, {"typical_p": 0.2}, {"typical_p": 0.9}, {"typical_p": 0.999})
    disabled_params = ({}, {"typical_p": 1.0}, {"typical_p": None})
    invalid_request_params = tuple({"typical_p": v} for v in (*BAD_NUMBERS, 1.5))


class TestEpsilon(SamplerConformance):
    impl = EpsilonProcessor
    spec = SPECS["epsilon"]
    request_params = ({"epsilon_cutoff": 3e-4}, {"epsilon_cutoff": 0.05}, {"epsilon_cutoff": 1.0})
    disabled_params = ({}, {"epsilon_cutoff": 0.0})
    invalid_request_params = tuple({"epsilon_cutoff": v} for v in (*BAD_NUMBERS, 1.5))


class TestEta(SamplerConformance):
    impl = EtaProcessor
    spec = SPECS["eta"]
    request_params = ({"eta_cutoff": 3e-4}, {"eta_cutoff": 0.05}, {"eta_cutoff": 1.0})
    disabled_params = ({}, {"eta_cutoff": 0.0})
    invalid_request_params = tuple({"eta_cutoff": v} for v in (*BAD_NUMBERS, 2))


class TestTopNSigma(SamplerConformance):
    impl = TopNSigmaProcessor
    spec = SPECS["top_n_sigma"]
    request_params = ({"top_n_sigma": 0.5}, {"top_n_sigma": 1.0}, {"top_n_sigma": 3.0})
    disabled_params = ({}, {"top_n_sigma": 0.0})
    invalid_request_params = tuple({"top_n_sigma": v} for v in BAD_NUMBERS)


class TestDynamicTemperature(SamplerConformance):
    impl = DynamicTemperatureProcessor
    spec = SPECS["dynatemp"]
    request_params = (
        {"dynatemp_range": 0.5, "temperature": 1.0},
        {"dynatemp_range": 2.0, "temperature": 0.7, "dynatemp_exponent": 0.5},
        {"dynatemp_range": 1.0, "temperature": 1.0, "dynatemp_exponent": 0.0},
    )
    disabled_params = ({}, {"dynatemp_range": 0.0}, {"dynatemp_range": 1.0, "temperature": 0})
    invalid_request_params = (
        *({"dynatemp_range": v} for v in BAD_NUMBERS),
        {"dynatemp_exponent": -1.0},
        {"temperature": -1.0},
    )
