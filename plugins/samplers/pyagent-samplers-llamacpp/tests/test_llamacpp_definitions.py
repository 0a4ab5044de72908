"""DRY, XTC and mirostat against llama.cpp's published test cases, brute-force oracles of their
definitions, and hypothesis properties."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import example, given, settings
from hypothesis import strategies as st

from pyagent_core.interfaces.sampler import AddedRequest, BatchUpdate, SamplerContext
from pyagent_core.testing.sampler import run_processor
from pyagent_samplers_llamacpp.dry import DryProcessor
from pyagent_samplers_llamacpp.mirostat import MirostatProcessor
from pyagent_samplers_llamacpp.xtc import XtcProcessor


def probs(logits: torch.Tensor) -> list[float]:
    return [round(p, 6) for p in logits.softmax(-1).tolist()]


def dry(uniform: int, context: list[int], **params) -> list[float]:
    logits = torch.full((1, uniform), 1.0 / uniform).log()
    return probs(run_processor(DryProcessor, logits, [params], contexts=[context])[0])


def test_dry_published_cases():
    """The expectations of llama.cpp's tests/test-sampling.cpp (multiplier, base, allowed, last_n, breakers)."""
    assert dry(4, [0, 1], dry_multiplier=1.0, dry_base=1.1, dry_allowed_length=2, dry_penalty_last_n=4) == [0.25] * 4
    assert dry(4, [0, 1, 2, 0, 1], dry_multiplier=1.0, dry_base=1.1, dry_allowed_length=2,
               dry_penalty_last_n=5) == [0.296923, 0.296923, 0.109232, 0.296923]
    assert dry(5, [0, 1, 3, 4, 0, 1], dry_multiplier=1.0, dry_base=1.1, dry_allowed_length=2,
               dry_penalty_last_n=6, dry_sequence_breakers=[[3]]) == [0.2] * 5
    assert dry(5, [0, 1, 2, 0, 1], dry_multiplier=2.0, dry_base=1.1, dry_allowed_length=2,
               dry_penalty_last_n=5) == [0.241818, 0.241818, 0.032727, 0.241818, 0.241818]
    assert dry(5, [0, 1, 2, 3, 4, 0, 1], dry_multiplier=1.0, dry_base=1.1, dry_allowed_length=4,
               dry_penalty_last_n=7) == [0.2] * 5


FLOAT_MAX_LOG = 88.7228391  # llama.cpp's ln(FLT_MAX)


def llama_cpp_penalty(multiplier: float, base: float, allowed: int, length: int) -> np.float32:
    """llama.cpp's penalty for extending a repeat of ``length`` tokens, in double: ``multiplier *
    base ** exponent`` with the exponent clamped to ``ln(FLT_MAX) / ln(base)``, then stored as a float
    (past FLT_MAX that is inf, so the logit becomes -inf)."""
    exponent = length - allowed
    if base > 1.000001:
        exponent = min(exponent, int(FLOAT_MAX_LOG / math.log(base)))
    with np.errstate(over="ignore"):
        return np.float32(multiplier * base**exponent)


def longest_repeats(context, vocab, allowed, breakers):
    """Brute force: for each penalised token, the longest repeat it would extend, searched at every
    position, limited by the latest complete breaker; single-token breakers are never penalised."""
    n = len(context)
    limit = n
    for i in range(n):
        head = context[n - 1 - i]
        tails = [b[1:] for b in breakers if b[0] == head and len(b) - 1 <= i
                 and list(b[1:]) == context[n - i:n - i + len(b) - 1]]
        if tails:
            limit = i - max(len(t) for t in tails)
            break
    if n <= allowed or limit < allowed:
        return {}
    single = {b[0] for b in breakers if len(b) == 1}
    lengths = {}
    for token in range(vocab):
        best = 0
        for end in range(n - 1):  # an earlier occurrence context[.. end] followed by `token`
            if context[end + 1] != token:
                continue
            length = 0
            while length <= end and context[end - length] == context[n - 1 - length]:
                length += 1
            best = max(best, min(length, limit))
        if best >= allowed and token not in single:
            lengths[token] = best
    return lengths


def dry_oracle(context, vocab, multiplier, base, allowed, breakers):
    """Each token's penalty: llama.cpp's formula over the brute-force longest repeat."""
    penalty = [0.0] * vocab
    for token, length in longest_repeats(context, vocab, allowed, breakers).items():
        penalty[token] = float(llama_cpp_penalty(multiplier, base, allowed, length))
    return penalty


@settings(max_examples=80, deadline=None)
@given(st.lists(st.integers(0, 4), min_size=0, max_size=30), st.integers(1, 3), st.floats(1.0, 3.0),
       st.lists(st.lists(st.integers(0, 4), min_size=1, max_size=2), max_size=2))
def test_dry_matches_the_brute_force_definition(context, allowed, base, breakers):
    logits = torch.zeros(1, 5, dtype=torch.float64)
    params = {"dry_multiplier": 0.7, "dry_base": base, "dry_allowed_length": allowed,
              "dry_sequence_breakers": breakers}
    out = run_processor(DryProcessor, logits, [params], contexts=[context])[0]
    expected = dry_oracle(context, 5, 0.7, base, allowed, breakers)
    np.testing.assert_allclose(-out.numpy(), expected, rtol=1e-6)


def test_dry_penalty_past_float_max_saturates_to_minus_inf():
    """2 * 1.75 ** 158 (162 repeated tokens) is past FLT_MAX: llama.cpp's float penalty is inf, so
    token 0 gets -inf and token 1 keeps its logit; the batch is not taken down."""
    params = {"dry_multiplier": 2.0, "dry_base": 1.75, "dry_allowed_length": 2, "dry_penalty_last_n": -1}
    out = run_processor(DryProcessor, torch.tensor([[1.0, 0.5]]), [params], contexts=[[0] * 162])[0]
    assert out.tolist() == [float("-inf"), 0.5]


@settings(max_examples=50, deadline=None)
@given(st.lists(st.integers(0, 2), min_size=1, max_size=3), st.integers(1, 90), st.floats(0.01, 1e30),
       st.floats(1.0, 30.0), st.integers(1, 4))
@example([0], 162, 2.0, 1.75, 2)
@example([0, 1], 90, 1e30, 1.000001, 1)
def test_dry_large_penalties_match_llama_cpps_formula(block, repeats, multiplier, base, allowed):
    """Large multipliers, bases and repeats never raise; every logit equals float32(logit) minus
    llama.cpp's penalty computed in double and stored as a float (inf past FLT_MAX)."""
    context = block * repeats
    logits = torch.tensor([[1.0, 0.5, -0.25]])
    params = {"dry_multiplier": multiplier, "dry_base": base, "dry_allowed_length": allowed}
    out = run_processor(DryProcessor, logits, [params], contexts=[context])[0].numpy()
    expected = logits[0].numpy().copy()
    for token, length in longest_repeats(context, 3, allowed, []).items():
        expected[token] = expected[token] - llama_cpp_penalty(multiplier, base, allowed, length)
    np.testing.assert_array_equal(out, expected)


def test_dry_window_and_long_repeats():
    """Only the last dry_penalty_last_n tokens count; the exponent is clamped so penalties stay finite."""
    context = [1, 2, 3, 1, 2]
    assert dry(5, context, dry_multiplier=1.0, dry_penalty_last_n=4) == [0.2] * 5
    assert dry(5, context, dry_multiplier=1.0, dry_penalty_last_n=5)[3] < 0.2
    out = run_processor(DryProcessor, torch.zeros(1, 3), [{"dry_multiplier": 1.0, "dry_base": 3.0}],
                        contexts=[[1, 2] * 200])
    assert bool(torch.isfinite(out).all()) and float(out[0, 1]) < -1e30


def xtc(probabilities, threshold):
    logits = torch.tensor([probabilities]).log()
    params = [{"xtc_probability": 1.0, "xtc_threshold": threshold, "seed": 0}]
    return torch.isfinite(run_processor(XtcProcessor, logits, params))[0].tolist()


def test_xtc_published_cases():
    """llama.cpp's XTC cases: the tokens above the threshold go, except the least probable of them."""
    p = [0.4, 0.3, 0.2, 0.1]
    assert xtc(p, 0.09) == [False, False, False, True]
    assert xtc(p, 0.19) == [False, False, True, True]
    assert xtc(p, 0.29) == [False, True, True, True]
    assert xtc(p, 0.39) == [True] * 4


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(-8, 8, width=32), min_size=2, max_size=30), st.floats(0.0, 0.5))
def test_xtc_removes_exactly_the_top_choices_but_the_least(row, threshold):
    logits = torch.tensor([row])
    p = logits.softmax(-1)[0]
    kept = torch.isfinite(run_processor(XtcProcessor, logits, [
        {"xtc_probability": 1.0, "xtc_threshold": threshold, "seed": 7}]))[0]
    above = (p >= threshold) & torch.isfinite(logits[0])
    if int(above.sum()) < 2:
        assert bool(kept.all())
    else:
        least = p[above].min()
        assert torch.equal(kept, ~above | (p == least))


def test_xtc_coin_follows_the_probability_and_the_seed():
    """With probability 0.3 about 30% of steps remove tokens; a seeded request repeats its coin flips."""
    logits = torch.tensor([[2.0, 1.0, 0.0]])

    def flips(seed):
        processor = XtcProcessor({}, SamplerContext(3))
        params = {"xtc_probability": 0.3, "xtc_threshold": 0.1, "seed": seed}
        processor.update_state(BatchUpdate(1, added=(AddedRequest(0, params),)))
        return [not bool(torch.isfinite(processor.apply(logits.clone())).all()) for _ in range(2000)]

    first = flips(11)
    assert first == flips(11) and first != flips(12)
    assert abs(sum(first) / len(first) - 0.3) < 0.04


def mirostat_run(mode, rows, chosen, tau=3.0, eta=0.5):
    """Apply mirostat step by step to ``rows``, appending ``chosen[i]`` after step i; return the outputs."""
    processor = MirostatProcessor({}, SamplerContext(rows[0].shape[0]))
    outputs: list[int] = []
    params = {"mirostat": mode, "mirostat_tau": tau, "mirostat_eta": eta}
    processor.update_state(BatchUpdate(1, added=(AddedRequest(0, params, output_token_ids=outputs),)))
    results = []
    for row, token in zip(rows, chosen, strict=True):
        results.append(processor.apply(row.unsqueeze(0).clone())[0])
        outputs.append(token)
    return results


@settings(max_examples=40, deadline=None)
@given(st.lists(st.lists(st.floats(-6, 6, width=32), min_size=8, max_size=8), min_size=1, max_size=6),
       st.floats(0.5, 4), st.floats(0.05, 1))
@example([[-2.264653909747007e-21, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]], 1.0, 1.0)  # row argmax 1, p ties: keeps 0
def test_mirostat_v2_keeps_surprise_below_mu_and_updates_mu(steps, tau, eta):
    rows = [torch.tensor(r) for r in steps]
    chosen = [int(r.softmax(-1).argmax()) for r in rows]  # a token mirostat always keeps (ties in p: lowest id)
    results = mirostat_run(2, rows, chosen, tau, eta)
    mu = 2 * tau
    for row, token, out in zip(rows, chosen, results, strict=True):
        p = row.softmax(-1)
        expected = -torch.log2(p) <= mu
        if not bool(expected.any()):  # the most probable token stays (the lowest id among ties)
            expected = torch.arange(8) == int(p.argmax())
        assert torch.equal(torch.isfinite(out), expected)
        mu -= eta * (-math.log2(float(out.softmax(-1)[token])) - tau)


def test_mirostat_v1_top_k_follows_the_zipf_estimate():
    """On a Zipf-distributed row (s = 1.2), k = (e * 2**mu / (1 - V**-e)) ** (1 / s) with e = s - 1."""
    vocab, s, tau = 1000, 1.2, 5.0
    ranks = np.arange(1, vocab + 1)
    row = torch.tensor(-s * np.log(ranks), dtype=torch.float32)
    out = mirostat_run(1, [row], [0], tau=tau)[0]
    e = s - 1
    k = (e * 2 ** (2 * tau) / (1 - vocab ** -e)) ** (1 / s)
    assert int(torch.isfinite(out).sum()) == int(k)
    assert bool(torch.isfinite(out[: int(k)]).all())


@pytest.mark.parametrize(("tau", "kept"), [(5.0, 1), (7.0, 4096)])
def test_mirostat_v1_on_a_flat_head_follows_the_formulas_limit(tau, kept):
    """The 100 most probable tokens tied: s = 0, so k = (2**mu / (V - 1)) ** (1 / s) tends to 0 (one
    token kept) when 2**mu < V - 1 (mu = 10, V = 4096) and to infinity (every token) when 2**mu > V - 1."""
    row = torch.zeros(4096)
    row[:200] = 2.0
    out = mirostat_run(1, [row], [0], tau=tau, eta=0.1)[0]
    assert int(torch.isfinite(out).sum()) == kept
    assert bool(torch.isfinite(out[0]))


def mirostat_v1_k(row: torch.Tensor, mu: float) -> int:
    """llama.cpp's mirostat v1 k in double, written from its loop over the sorted probabilities (m = 100),
    with the formula's limits where it divides by zero (s = 0: 0 or infinity; s = 1: 2**mu / ln V)."""
    p = sorted(row.softmax(-1).double().tolist(), reverse=True)
    vocab = len(p)
    sum_tb = sum_tt = 0.0
    for i in range(min(99, vocab - 1)):
        t = math.log((i + 2) / (i + 1))
        sum_tb += t * math.log(p[i] / p[i + 1])
        sum_tt += t * t
    s = sum_tb / sum_tt
    e = s - 1
    if s == 0:
        k = 0.0 if 2**mu < vocab - 1 else math.inf if 2**mu > vocab - 1 else 1.0
    elif e == 0:
        k = 2**mu / math.log(vocab)
    else:
        try:
            k = (e * 2**mu / (1 - vocab**-e)) ** (1 / s)
        except OverflowError:  # past the largest double: past every count
            k = math.inf
    return vocab if k >= vocab else max(int(k), 1)


@settings(max_examples=60, deadline=None)
@given(st.integers(120, 3000), st.integers(0, 150), st.floats(0.0, 3.0), st.floats(0.5, 8.0), st.integers(0, 2**16))
def test_mirostat_v1_keeps_the_formulas_k(vocab, flat, slope, tau, seed):
    """Rows with a flat head of ``flat`` tied tokens (none, fewer than 100, or the whole estimate)
    then a Zipf-like tail of random slope: the kept count is the formula's k."""
    gen = torch.Generator().manual_seed(seed)
    ranks = torch.arange(1, vocab + 1, dtype=torch.float32)
    row = -slope * torch.log(ranks) - 0.01 * torch.rand(vocab, generator=gen)
    row[:flat] = 1.0
    row[flat:] = torch.minimum(row[flat:], torch.tensor(0.5))
    out = mirostat_run(1, [row], [0], tau=tau, eta=0.1)[0]
    assert int(torch.isfinite(out).sum()) == mirostat_v1_k(row, 2 * tau)
