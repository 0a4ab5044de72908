"""top-nσ, typical, dynamic temperature, XTC, mirostat and DRY (with string sequence breakers over the
embedded model's vocabulary) against llama.cpp's own samplers (llama-cpp-python's low-level API) on
the same random logits; skipped when llama-cpp-python is not installed."""

from __future__ import annotations

import ctypes
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import torch

from pyagent_core.interfaces.grammar import TokenizerInfo
from pyagent_core.interfaces.sampler import AddedRequest, BatchUpdate, SamplerContext
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


def llama_cpp_mirostat_k(row: np.ndarray, mu: float) -> float:
    """Mirostat v1's k as llama.cpp computes it, in float32."""
    p = np.sort(torch.from_numpy(row).softmax(-1).numpy())[::-1]
    t = np.log(np.arange(2, 101, dtype=np.float32) / np.arange(1, 100, dtype=np.float32))[:len(p) - 1]
    b = np.log(p[:len(t)] / p[1:len(t) + 1])
    s = np.float32((t * b).sum() / (t * t).sum())
    with np.errstate(over="ignore", divide="ignore"):
        base = (s - 1) * np.float32(2) ** np.float32(mu) / (1 - np.float32(len(row)) ** -(s - 1))
        return float(base ** (np.float32(1) / s))


@pytest.mark.parametrize("row", ROWS, ids=lambda r: f"n{len(r)}")
@pytest.mark.parametrize("tau", [1.0, 3.0, 5.0, 8.0])
def test_mirostat_keeps_llama_cpps_tokens(row: np.ndarray, tau: float) -> None:
    """The first step of mirostat v1 (top k from the Zipf estimate) and v2 (surprise below 2 tau).

    Where k is past the int range llama.cpp's ``int(k)`` is undefined in C (INT_MIN on x86, so it
    keeps one token); pyagent follows the formula there and keeps every candidate."""
    mine = ours("mirostat", row, {"mirostat": 1, "mirostat_tau": tau})
    if llama_cpp_mirostat_k(row, 2 * tau) >= 2**31:
        assert len(mine) == len(row)
    else:
        v1 = llama_cpp.llama_sampler_init_mirostat(len(row), 0, tau, 0.1, 100)
        assert mine.keys() == llama_cpp_apply(v1, row).keys()
    v2 = llama_cpp.llama_sampler_init_mirostat_v2(0, tau, 0.1)
    assert ours("mirostat", row, {"mirostat": 2, "mirostat_tau": tau}).keys() == llama_cpp_apply(v2, row).keys()


def test_mirostat_v1_keeps_one_token_of_a_flat_head_like_llama_cpp() -> None:
    """The 100 most probable tokens tied (Zipf estimate 0) with 2**mu < V - 1: one token."""
    row = np.zeros(4096, dtype=np.float32)
    row[:200] = 2.0
    sampler = llama_cpp.llama_sampler_init_mirostat(len(row), 0, 5.0, 0.1, 100)
    assert len(llama_cpp_apply(sampler, row)) == 1
    assert len(ours("mirostat", row, {"mirostat": 1, "mirostat_tau": 5.0, "mirostat_eta": 0.1})) == 1


@pytest.fixture(scope="module")
def embedded_vocab() -> Iterator[tuple[object, TokenizerInfo]]:
    """llama.cpp's vocabulary of the embedded model (read with vocab_only) and pyagent's view of it."""
    grammar_corpus = pytest.importorskip("pyagent_engine.testing.grammar_corpus")
    from pyagent_engine.models.embedded import find_embedded_gguf

    _, info = grammar_corpus.embedded_tokenizer()
    params = llama_cpp.llama_model_default_params()
    params.vocab_only = True
    model = llama_cpp.llama_model_load_from_file(str(find_embedded_gguf()).encode(), params)
    yield llama_cpp.llama_model_get_vocab(model), info
    llama_cpp.llama_model_free(model)


def llama_cpp_dry(vocab: object, context: list[int], row: np.ndarray, params: dict[str, Any]) -> dict[int, float]:
    """llama.cpp's DRY sampler after accepting ``context``, applied to ``row`` (its C API takes the
    window itself: a window of -1, the whole context, is the context's length there)."""
    breakers = [b.encode() for b in params["dry_sequence_breakers"]]
    window = len(context) if params["dry_penalty_last_n"] == -1 else params["dry_penalty_last_n"]
    sampler = llama_cpp.llama_sampler_init_dry(
        vocab, params["dry_multiplier"], params["dry_base"], params["dry_allowed_length"], window,
        (ctypes.c_char_p * len(breakers))(*breakers), len(breakers))
    for token in context:
        llama_cpp.llama_sampler_accept(sampler, token)
    return llama_cpp_apply(sampler, row)


DRY_TEXT = 'Name: "Ada"\nRole: *engineer*\nName: "Ada"\nRole: *engineer*\nName: "Ada"\nRole:'


@pytest.mark.parametrize("case", range(24))
def test_dry_with_string_breakers_matches_llama_cpp(embedded_vocab: tuple[object, TokenizerInfo], case: int) -> None:
    """Random windows of a repetitive text with newlines, colons, quotes and asterisks; llama.cpp's
    default breaker strings or others; float32-exact multipliers and bases; penalties past FLT_MAX."""
    vocab, info = embedded_vocab
    rng = np.random.default_rng(case)
    assert info.encode is not None
    tokens = info.encode(DRY_TEXT)
    start = int(rng.integers(0, len(tokens) // 2))
    context = tokens[start:] if case % 6 else [tokens[0]] * 170
    breakers = [["\n", ":", '"', "*"], ["Role", "\n"], [": *"], []][case % 4]
    params = {"dry_multiplier": [0.5, 2.0, 2.0**100][case // 4 % 3], "dry_base": [1.75, 1.25, 3.0][case % 3],
              "dry_allowed_length": int(rng.integers(1, 4)), "dry_penalty_last_n": [-1, 16][case % 2],
              "dry_sequence_breakers": breakers}
    row = rng.normal(0, 2, size=len(info.vocab)).astype(np.float32)
    processor = get_registry().load(get_registry().get(SAMPLER, "dry"))(
        {}, SamplerContext(len(info.vocab), tokenizer_info=lambda: info))
    processor.update_state(BatchUpdate(1, added=(AddedRequest(0, params, context),)))
    out = processor.apply(torch.from_numpy(row[None, :].copy()))[0]
    mine = {i: float(v) for i, v in enumerate(out.tolist()) if np.isfinite(v)}
    assert mine == llama_cpp_dry(vocab, context, row, params)
    if case == 6:  # 2 * 1.75 ** 158 is past FLT_MAX: the repeated token is -inf in both
        assert context[0] not in mine and len(mine) == len(row) - 1
