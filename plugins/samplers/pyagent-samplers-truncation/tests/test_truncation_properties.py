"""top_n_sigma and dynatemp against llama.cpp's published test cases and their defining properties."""

from __future__ import annotations

import math

import numpy as np
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from pyagent_core.interfaces.sampler import AddedRequest, BatchUpdate, SamplerContext
from pyagent_core.kinds import SAMPLER
from pyagent_core.registry import get_registry
from pyagent_core.testing.sampler import run_processor
from pyagent_samplers_truncation.dynatemp import DynamicTemperatureProcessor
from pyagent_samplers_truncation.top_n_sigma import TopNSigmaProcessor
from pyagent_samplers_truncation.typical import TypicalProcessor

finite_rows = st.lists(st.floats(-30, 30, allow_nan=False, width=32), min_size=2, max_size=40)
masked_rows = st.lists(st.one_of(st.floats(-30, 30, width=32), st.just(-math.inf)), min_size=2, max_size=40).filter(
    lambda r: any(math.isfinite(v) for v in r))


def temperature_processor() -> type:
    """The ``temperature`` processor that dynatemp hands its rows to, from whichever plugin serves it."""
    return get_registry().load(get_registry().get(SAMPLER, "temperature"))


def probs_after(logits: torch.Tensor) -> list[float]:
    return [round(p, 5) for p in logits.softmax(-1).tolist()]


def test_llama_cpp_published_cases():
    """The expectations of llama.cpp's tests/test-sampling.cpp for top-n-sigma and typical."""
    logits = torch.tensor([[0.1, 0.2, 0.3, 0.4]]).log()
    one_sigma = run_processor(TopNSigmaProcessor, logits, [{"top_n_sigma": 1.0}])[0]
    assert probs_after(one_sigma) == [0.0, 0.0, 0.42857, 0.57143]
    assert torch.equal(run_processor(TopNSigmaProcessor, logits, [{"top_n_sigma": 3.0}]), logits)
    for probs, kept in (([0.97, 0.01, 0.01, 0.01], [True, False, False, False]),
                        ([0.4, 0.2, 0.2, 0.2], [False, True, True, True])):
        out = run_processor(TypicalProcessor, torch.tensor([probs]).log(), [{"typical_p": 0.5}])
        assert torch.isfinite(out)[0].tolist() == kept


@settings(max_examples=60, deadline=None)
@given(masked_rows, st.floats(0.01, 5))
def test_top_n_sigma_keeps_exactly_the_logits_above_the_threshold(row, n):
    logits = torch.tensor([row])
    out = run_processor(TopNSigmaProcessor, logits, [{"top_n_sigma": n}])[0]
    finite = np.array([v for v in row if math.isfinite(v)], dtype=np.float64)
    threshold = finite.max() - n * finite.std()
    for value, kept in zip(row, torch.isfinite(out).tolist(), strict=True):
        if math.isfinite(value) and abs(value - threshold) > 1e-3 * (1 + abs(threshold)):
            assert kept == (value >= threshold)
    assert bool(torch.isfinite(out[logits[0].argmax()]))


@settings(max_examples=60, deadline=None)
@given(masked_rows, st.floats(0.05, 3), st.floats(0.05, 3), st.floats(0, 3))
def test_dynatemp_then_temperature_divides_by_the_entropy_temperature(row, temperature, spread, exponent):
    logits = torch.tensor([row], dtype=torch.float64)
    params = [{"temperature": temperature, "dynatemp_range": spread, "dynatemp_exponent": exponent}]
    out = run_processor(temperature_processor(), run_processor(DynamicTemperatureProcessor, logits, params), params)[0]
    finite = np.array([v for v in row if math.isfinite(v)])
    probs = np.exp(finite - finite.max())
    probs /= probs.sum()
    entropy = -sum(p * math.log(p) for p in probs if p > 0)
    low, high = max(0.0, temperature - spread), temperature + spread
    expected = torch.tensor(row, dtype=torch.float64)
    if len(finite) == 1:
        torch.testing.assert_close(out, expected / temperature)
        return
    dynamic = low + (high - low) * (entropy / math.log(len(finite))) ** exponent
    assert low - 1e-12 <= dynamic <= high + 1e-12
    if dynamic > 0:
        expected = expected / dynamic
    else:
        expected = torch.where(expected == expected.max(), expected / temperature, -math.inf)
    # a near-deterministic row (largest probability 1 - eps) has a tiny entropy whose log(1 - eps) terms
    # carry a relative error of ~1e-16 / eps in either implementation; the exponent multiplies it, and
    # dividing by the tiny temperature keeps it (eps = 1e-11 moved a value by 1.6e-6 relative)
    eps = 1.0 - probs.max()
    rtol = 1e-6 + (exponent * 4e-16 / eps if eps > 0 else math.inf)
    torch.testing.assert_close(out, expected, rtol=rtol, atol=1e-9)


def test_dynatemp_extremes_of_entropy():
    """A uniform row gets T + range; a near one-hot row gets about max(0, T - range)."""
    params = [{"temperature": 1.0, "dynatemp_range": 0.5}]
    processor = DynamicTemperatureProcessor({}, SamplerContext(8))
    processor.update_state(BatchUpdate(2, added=(AddedRequest(0, params[0]), AddedRequest(1, params[0]))))
    logits = torch.stack([torch.zeros(8), torch.tensor([60.0] + [0.0] * 7)])
    temperatures = processor.dynamic_temperature(logits, [0, 1]).flatten().tolist()
    assert abs(temperatures[0] - 1.5) < 1e-6 and abs(temperatures[1] - 0.5) < 1e-6
