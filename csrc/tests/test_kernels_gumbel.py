"""Gumbel-max kernel: C (every ISA) and the torch fallback choose the same tokens as a pure-Python
oracle of the random stream, draws follow the softmax, and rows do not depend on their batch."""

from __future__ import annotations

import math

import pytest
import torch

import pyagent_kernels
from pyagent_kernels import KernelArgumentError
from pyagent_kernels._gumbel_torch import log_poly
from pyagent_kernels.gumbel import gumbel_sample, to_signed64

COMPILED = bool(pyagent_kernels.status()["compiled"])
BACKENDS = ["torch", pytest.param("c", marks=pytest.mark.skipif(not COMPILED, reason="not built"))]
M64 = (1 << 64) - 1
GOLDEN = 0x9E3779B97F4A7C15


def mix64(z: int) -> int:
    """splitmix64's finaliser on Python ints (the published constants)."""
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return z ^ (z >> 31)


def oracle_token(row: list[float], seed: int, step: int) -> int:
    """argmax of logit + Gumbel noise, with math.log: the same token unless two scores lie within
    ~1e-15 of each other (never in these tests' inputs)."""
    key = mix64((seed + (step + 1) * GOLDEN) & M64)
    best, best_score = -1, -math.inf
    for j, x in enumerate(row):
        if x == -math.inf:
            continue
        h = mix64((key + (j + 1) * GOLDEN) & M64)
        u = ((h >> 11) + 0.5) * 2.0**-53
        score = x - math.log(-math.log(u))
        if score > best_score:
            best, best_score = j, score
    return best


def signed(values: list[int]) -> torch.Tensor:
    return torch.tensor([to_signed64(v) for v in values], dtype=torch.int64)


def test_log_polynomial_is_accurate() -> None:
    edges = torch.tensor([1e-17, 0.5, 1.0, 2.0, 1e300], dtype=torch.float64)
    x = torch.cat([torch.rand(10000, dtype=torch.float64) * 10, edges])
    got = log_poly(x)
    assert torch.allclose(got, x.log(), rtol=4e-16, atol=4e-16)


@pytest.mark.parametrize("backend", BACKENDS)
def test_matches_python_oracle(backend: str) -> None:
    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(6, 300, generator=gen) * 2
    logits[1, 5:] = -math.inf
    logits[2, ::2] = -math.inf
    seeds = [0, 1, 2**64 - 1, 12345, 2**63, 7]
    steps = [0, 3, 10, 2**40, 1, 0]
    got = gumbel_sample(logits, signed(seeds), signed(steps), backend=backend).tolist()
    assert got == [oracle_token(logits[r].tolist(), seeds[r], steps[r]) for r in range(6)]


@pytest.mark.skipif(not COMPILED, reason="not built")
def test_c_equals_torch_on_every_isa(c_isa: str) -> None:
    gen = torch.Generator().manual_seed(1)
    logits = torch.randn(40, 1000, generator=gen) * 3
    keep = torch.rand(40, 1000, generator=gen) < torch.linspace(0.002, 1.0, 40).unsqueeze(1)
    keep[:, 0] = True
    logits[~keep] = -math.inf
    seeds = torch.randint(-(2**62), 2**62, (40,), generator=gen)
    steps = torch.arange(40)
    assert torch.equal(gumbel_sample(logits, seeds, steps, backend="c"),
                       gumbel_sample(logits, seeds, steps, backend="torch"))


def test_draws_follow_softmax() -> None:
    """Chi-square over 4000 steps of one row with 5 finite logits (critical value 18.5, p = 0.001)."""
    logits = torch.full((1, 50), -math.inf)
    logits[0, [3, 10, 11, 30, 49]] = torch.tensor([1.0, 0.0, -1.0, 2.0, 0.5])
    probs = logits.softmax(dim=1)[0]
    counts = torch.zeros(50)
    steps = 4000
    for step in range(steps):
        counts[int(gumbel_sample(logits, signed([99]), signed([step]))[0])] += 1
    kept = probs > 0
    assert counts[~kept].sum() == 0
    expected = probs[kept] * steps
    assert float(((counts[kept] - expected) ** 2 / expected).sum()) < 18.5


def test_rows_do_not_depend_on_the_batch() -> None:
    gen = torch.Generator().manual_seed(2)
    logits = torch.randn(8, 500, generator=gen)
    seeds, steps = torch.arange(8) * 1000003, torch.arange(8) + 5
    together = gumbel_sample(logits, seeds, steps)
    order = torch.tensor([5, 2, 7, 0, 1, 6, 3, 4])
    shuffled = gumbel_sample(logits[order].contiguous(), seeds[order], steps[order])
    alone = [int(gumbel_sample(logits[r:r + 1], seeds[r:r + 1], steps[r:r + 1])[0]) for r in range(8)]
    assert torch.equal(shuffled, together[order]) and together.tolist() == alone


@pytest.mark.parametrize("backend", BACKENDS)
def test_unselectable_rows_raise(backend: str) -> None:
    zeros = torch.zeros(3, dtype=torch.int64)
    for bad in (-math.inf, math.nan, math.inf):
        logits = torch.zeros(3, 4)
        logits[1] = -math.inf if bad == -math.inf else 0.0
        logits[1, 2] = bad
        with pytest.raises(KernelArgumentError, match="row 1"):
            gumbel_sample(logits, zeros, zeros, backend=backend)
