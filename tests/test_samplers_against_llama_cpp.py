"""top-nσ, typical, dynamic temperature and XTC against llama.cpp's own samplers (llama-cpp-python's
low-level API) on the same random logits; skipped when llama-cpp-python is not installed."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest
import torch

from pyagent_core.kinds import SAMPLER
from pyagent_core.registry import get_registry
from pyagent_core.testing.sampler import run_processor

llama_cpp = pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed")


def llama_cpp_apply(sampler: object, row: np.ndarray) -> dict[int, float]:
    """Token id -> logit of the candidates llama.cpp's ``sampler`` keeps from ``row``."""
    data = (llama_cpp.llama_token_data * len(row))(*[llama_cpp.llama_token_data(i, float(v), 0.0)
                                                     for i, v in enumerate(row)])
    array = llama_cpp.llama_token_data_array(data, len(row), -1, False)
    llama_cpp.llama_sampler_apply(sampler, ctypes.byref(array))
    kept = {array.data[i].id: array.data[i].logit for i in range(array.size)}  # XTC moves the start
    llama_cpp.llama_sampler_free(sampler)
    return {token: logit for token, logit in kept.items() if np.isfinite(logit)}


def ours(name: str, row: np.ndarray, params: dict[str, float]) -> dict[int, float]:
    """Token id -> logit of the candidates the installed processor ``name`` keeps from ``row``."""
    processor = get_registry().load(get_registry().get(SAMPLER, name))
    out = run_processor(processor, torch.from_numpy(row[None, :].astype(np.float32)), [params])[0]
    return {i: float(v) for i, v in enumerate(out.tolist()) if np.isfinite(v)}


ROWS = [np.random.default_rng(seed).normal(0, scale, size=size).astype(np.float32)
        for seed, (scale, size) in enumerate([(1, 50), (3, 200), (0.3, 64), (6, 1000), (2, 7)])]


@pytest.mark.parametrize("row", ROWS, ids=lambda r: f"n{len(r)}")
@pytest.mark.parametrize("n", [0.5, 1.0, 2.0])
def test_top_n_sigma_keeps_llama_cpps_tokens(row: np.ndarray, n: float) -> None:
    assert ours("top_n_sigma", row, {"top_n_sigma": n}).keys() == \
        llama_cpp_apply(llama_cpp.llama_sampler_init_top_n_sigma(n), row).keys()


@pytest.mark.parametrize("row", ROWS, ids=lambda r: f"n{len(r)}")
@pytest.mark.parametrize("p", [0.2, 0.5, 0.9])
def test_typical_keeps_llama_cpps_tokens(row: np.ndarray, p: float) -> None:
    assert ours("typical", row, {"typical_p": p}).keys() == \
        llama_cpp_apply(llama_cpp.llama_sampler_init_typical(p, 1), row).keys()


@pytest.mark.parametrize("row", ROWS, ids=lambda r: f"n{len(r)}")
@pytest.mark.parametrize(("spread", "exponent"), [(0.5, 1.0), (0.9, 2.0), (0.3, 0.5)])
def test_dynamic_temperature_scales_like_llama_cpp(row: np.ndarray, spread: float, exponent: float) -> None:
    """temp_ext with temperature 1 divides each logit by the entropy-scaled temperature."""
    reference = llama_cpp_apply(llama_cpp.llama_sampler_init_temp_ext(1.0, spread, exponent), row)
    mine = ours("dynatemp", row, {"temperature": 1.0, "dynatemp_range": spread, "dynatemp_exponent": exponent})
    assert mine.keys() == reference.keys()
    for token, logit in reference.items():
        assert mine[token] == pytest.approx(logit, rel=1e-4, abs=1e-5)


@pytest.mark.parametrize("row", ROWS, ids=lambda r: f"n{len(r)}")
@pytest.mark.parametrize("threshold", [0.01, 0.05, 0.1])
def test_xtc_with_probability_one_removes_llama_cpps_tokens(row: np.ndarray, threshold: float) -> None:
    """With probability 1 XTC always fires, so both remove the same top choices."""
    assert ours("xtc", row, {"xtc_probability": 1.0, "xtc_threshold": threshold}).keys() == \
        llama_cpp_apply(llama_cpp.llama_sampler_init_xtc(1.0, threshold, 1, 0), row).keys()
