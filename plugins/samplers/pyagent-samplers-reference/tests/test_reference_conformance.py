"""The conformance kit run against every reference sampler."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from pyagent_core.testing.sampler import SamplerConformance
from pyagent_core.types import SamplerSpec
from pyagent_samplers_reference import plugin
from pyagent_samplers_reference.greedy import GreedySelector
from pyagent_samplers_reference.multinomial import MultinomialSelector
from pyagent_samplers_reference.temperature import TemperatureProcessor
from pyagent_samplers_reference.top_k import TopKProcessor
from pyagent_samplers_reference.top_p import TopPProcessor


def registered_specs() -> dict[str, SamplerSpec]:
    """The specs the plugin registers, by name."""
    specs: list[SamplerSpec] = []
    plugin.pyagent_register_samplers(register=specs.append)
    return {spec.name: spec for spec in specs}


SPECS = registered_specs()


class TestTemperature(SamplerConformance):
    impl = TemperatureProcessor
    spec = SPECS["temperature"]
    request_params = ({"temperature": 0.5}, {"temperature": 2.0}, {"temperature": 1e-3}, {"temperature": 7})
    disabled_params = ({}, {"temperature": 0}, {"temperature": 1.0}, {"temperature": None})
    invalid_request_params = (
        {"temperature": -0.5}, {"temperature": float("nan")}, {"temperature": float("inf")},
        {"temperature": "hot"}, {"temperature": True},
    )


class TestTopK(SamplerConformance):
    impl = TopKProcessor
    spec = SPECS["top_k"]
    request_params = ({"top_k": 1}, {"top_k": 5}, {"top_k": 63}, {"top_k": 64}, {"top_k": 1000})
    disabled_params = ({}, {"top_k": 0})
    invalid_request_params = ({"top_k": -1}, {"top_k": 2.5}, {"top_k": "5"}, {"top_k": False})


class TestTopP(SamplerConformance):
    impl = TopPProcessor
    spec = SPECS["top_p"]
    request_params = ({"top_p": 0.0}, {"top_p": 0.1}, {"top_p": 0.5}, {"top_p": 0.9}, {"top_p": 0.999})
    disabled_params = ({}, {"top_p": 1.0}, {"top_p": 1})
    invalid_request_params = ({"top_p": -0.1}, {"top_p": 1.5}, {"top_p": float("nan")}, {"top_p": "0.9"})


class TestGreedy(SamplerConformance):
    impl = GreedySelector
    spec = SPECS["greedy"]


class TestMultinomial(SamplerConformance):
    impl = MultinomialSelector
    spec = SPECS["multinomial"]
    options: ClassVar[Mapping[str, Any]] = {"seed": 99}
    request_params = ({"seed": 0}, {"seed": 1}, {"seed": 12345}, {"seed": 2**64 - 1})
    filler_params = ({}, {"seed": None})
    invalid_request_params = ({"seed": -1}, {"seed": 2**64}, {"seed": 1.5}, {"seed": "7"})


class TestMultinomialUnseededEngine(SamplerConformance):
    """Without a ``seed`` option, unseeded requests draw from system entropy; seeded ones still repeat."""

    impl = MultinomialSelector
    spec = SPECS["multinomial"]
    request_params = ({"seed": 3}, {"seed": 4})
