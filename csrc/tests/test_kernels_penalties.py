"""Penalty kernels: C (every ISA) and the torch fallback against a brute-force oracle, bitwise."""

from __future__ import annotations

import math
import random

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import pyagent_kernels
from pyagent_kernels import KernelArgumentError
from pyagent_kernels.penalties import PenaltyCounts, PenaltyParams, apply_penalties, update_penalty_counts

COMPILED = bool(pyagent_kernels.status()["compiled"])
BACKENDS = ["torch", pytest.param("c", marks=pytest.mark.skipif(not COMPILED, reason="not built"))]


def oracle(row: list[float], context: list[int], output_from: int, rp: float, fp: float, pp: float) -> list[float]:
    """Penalise one row by walking the history: ``context`` is the penalised window, its tokens at
    positions >= ``output_from`` are outputs. Float32 arithmetic through torch scalars."""
    x = torch.tensor(row, dtype=torch.float32)
    seen = set(context)
    out_counts: dict[int, int] = {}
    for position, token in enumerate(context):
        if position >= output_from:
            out_counts[token] = out_counts.get(token, 0) + 1
    if rp == 1.0 and fp == 0.0 and pp == 0.0:
        return x.tolist()
    rp32, fp32, pp32 = (torch.tensor(v, dtype=torch.float32) for v in (rp, fp, pp))
    for token in seen:
        v = x[token]
        if rp != 1.0:
            v = v * rp32 if v < 0 else v / rp32
        if out_counts.get(token, 0) > 0:
            v = v - fp32 * torch.tensor(float(out_counts[token]), dtype=torch.float32)
            v = v - pp32
        x[token] = v
    return x.tolist()


def build(histories: list[tuple[list[int], list[int], int]], vocab: int, backend: str) -> PenaltyCounts:
    """Counts of each (prompt, output, last_n) history, added token by token with a sliding window
    (as the processor does), in slots reversed relative to the rows."""
    counts = PenaltyCounts(len(histories), vocab)
    for row, (prompt, output, last_n) in enumerate(histories):
        slot = len(histories) - 1 - row
        context = prompt + output
        for position, token in enumerate(context):
            slots, tokens, d_seen, d_out = [slot], [token], [1], [int(position >= len(prompt))]
            if last_n > 0 and position >= last_n:
                leaving = position - last_n
                slots.append(slot)
                tokens.append(context[leaving])
                d_seen.append(-1)
                d_out.append(-int(leaving >= len(prompt)))
            update_penalty_counts(counts, *(torch.tensor(v, dtype=torch.int32) for v in (slots, tokens, d_seen, d_out)),
                                  backend=backend)
    return counts


def random_case(rng: random.Random, rows: int, vocab: int):
    histories = []
    for _ in range(rows):
        prompt = [rng.randrange(vocab) for _ in range(rng.randrange(0, 30))]
        output = [rng.randrange(vocab) for _ in range(rng.randrange(0, 30))]
        histories.append((prompt, output, rng.choice([-1, 1, 5, 17, 100])))
    params = [(rng.choice([1.0, 1.3, 0.7, 2.0]), rng.choice([0.0, 0.5, -1.25, 2.0]), rng.choice([0.0, 0.4, -2.0]))
              for _ in range(rows)]
    return histories, params


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("seed", range(6))
def test_matches_oracle(backend: str, seed: int) -> None:
    rng = random.Random(seed)
    rows, vocab = 5, rng.choice([7, 64, 65, 300])
    histories, params = random_case(rng, rows, vocab)
    logits = torch.randn(rows, vocab, generator=torch.Generator().manual_seed(seed)) * 3
    logits[0, :3] = torch.tensor([0.0, -0.0, -math.inf])
    counts = build(histories, vocab, backend)
    rp, fp, pp = (torch.tensor([p[i] for p in params], dtype=torch.float32) for i in range(3))
    slots = torch.arange(rows - 1, -1, -1, dtype=torch.int32)
    got = logits.clone()
    apply_penalties(got, counts, slots, repetition=rp, frequency=fp, presence=pp, backend=backend)
    for row, (prompt, output, last_n) in enumerate(histories):
        context = prompt + output
        start = max(0, len(context) - last_n) if last_n > 0 else 0
        want = oracle(logits[row].tolist(), context[start:], len(prompt) - start, *params[row])
        assert torch.equal(got[row].view(torch.int32), torch.tensor(want, dtype=torch.float32).view(torch.int32))


@pytest.mark.skipif(not COMPILED, reason="not built")
@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10**6), vocab=st.integers(1, 200), rows=st.integers(1, 6))
def test_c_equals_torch(seed: int, vocab: int, rows: int) -> None:
    rng = random.Random(seed)
    histories, params = random_case(rng, rows, vocab)
    by_backend = {}
    for backend in ("c", "torch"):
        counts = build(histories, vocab, backend)
        logits = torch.randn(rows, vocab, generator=torch.Generator().manual_seed(seed)) * 4
        rp, fp, pp = (torch.tensor([p[i] for p in params], dtype=torch.float32) for i in range(3))
        apply_penalties(logits, counts, torch.arange(rows - 1, -1, -1, dtype=torch.int32),
                        repetition=rp, frequency=fp, presence=pp, backend=backend)
        by_backend[backend] = (logits, counts)
    (c_logits, c_counts), (t_logits, t_counts) = by_backend["c"], by_backend["torch"]
    assert torch.equal(c_logits.view(torch.int32), t_logits.view(torch.int32))
    for name in ("seen", "out", "bits", "num_present"):
        assert torch.equal(getattr(c_counts, name), getattr(t_counts, name))
    for slot in range(rows):  # the same tokens in the same order; past the count, nothing to compare
        n = int(c_counts.num_present[slot])
        assert torch.equal(c_counts.present[slot, :n], t_counts.present[slot, :n])
        assert sorted(c_counts.present[slot, :n].tolist()) == (c_counts.seen[slot] > 0).nonzero().flatten().tolist()


def test_all_isas_agree(c_isa: str) -> None:
    rng = random.Random(3)
    histories, params = random_case(rng, 4, 500)
    counts = build(histories, 500, "c")
    logits = torch.randn(4, 500, generator=torch.Generator().manual_seed(1))
    want = logits.clone()
    rp, fp, pp = (torch.tensor([p[i] for p in params], dtype=torch.float32) for i in range(3))
    slots = torch.arange(3, -1, -1, dtype=torch.int32)
    apply_penalties(logits, counts, slots, repetition=rp, frequency=fp, presence=pp, backend="c")
    apply_penalties(want, counts, slots, repetition=rp, frequency=fp, presence=pp, backend="torch")
    assert torch.equal(logits, want)


@pytest.mark.parametrize("backend", BACKENDS)
def test_bad_updates_change_nothing(backend: str) -> None:
    counts = PenaltyCounts(2, 10)
    i32 = lambda *v: torch.tensor(v, dtype=torch.int32)  # noqa: E731
    update_penalty_counts(counts, i32(0, 1), i32(3, 4), i32(1, 1), i32(1, 0), backend=backend)
    before = [t.clone() for t in (counts.seen, counts.out, counts.bits, counts.present, counts.num_present)]
    with pytest.raises(KernelArgumentError, match="token 10"):
        update_penalty_counts(counts, i32(0, 0), i32(3, 10), i32(1, 1), i32(0, 0), backend=backend)
    with pytest.raises(KernelArgumentError, match="slot 2"):
        update_penalty_counts(counts, i32(2), i32(3), i32(1), i32(0), backend=backend)
    with pytest.raises(KernelArgumentError, match="negative"):
        update_penalty_counts(counts, i32(1, 0), i32(4, 3), i32(-1, -2), i32(0, 0), backend=backend)
    after = (counts.seen, counts.out, counts.bits, counts.present, counts.num_present)
    assert all(torch.equal(a, b) for a, b in zip(before, after, strict=True))
    assert counts.bits[0, 0] == 1 << 3 and counts.bits[1, 0] == 1 << 4


@pytest.mark.parametrize("backend", BACKENDS)
def test_bad_parameters_raise_before_writing(backend: str) -> None:
    counts = PenaltyCounts(1, 8)
    i32 = lambda *v: torch.tensor(v, dtype=torch.int32)  # noqa: E731
    update_penalty_counts(counts, i32(0), i32(2), i32(1), i32(1), backend=backend)
    logits = torch.ones(2, 8)
    for kwargs, message in (
        ({"repetition": torch.tensor([1.2, 0.0])}, r"repetition\[1\]"),
        ({"frequency": torch.tensor([math.nan, 0.0])}, r"frequency\[0\]"),
        ({"presence": torch.tensor([0.0, math.inf])}, r"presence\[1\]"),
    ):
        with pytest.raises(KernelArgumentError, match=message):
            apply_penalties(logits, counts, i32(0, 0), backend=backend, **kwargs)
    with pytest.raises(KernelArgumentError, match="slots"):
        apply_penalties(logits, counts, i32(0, 1), repetition=torch.tensor([2.0, 2.0]), backend=backend)
    assert torch.equal(logits, torch.ones(2, 8))


@pytest.mark.parametrize("backend", BACKENDS)
def test_sequences_update_like_tensors(backend: str) -> None:
    rng = random.Random(8)
    entries = [(rng.randrange(3), rng.randrange(50), 1, rng.randrange(2)) for _ in range(200)]
    by_tensors, by_lists = PenaltyCounts(3, 50), PenaltyCounts(3, 50)
    columns = [list(column) for column in zip(*entries, strict=True)]
    update_penalty_counts(by_tensors, *(torch.tensor(c, dtype=torch.int32) for c in columns), backend=backend)
    update_penalty_counts(by_lists, *columns, backend=backend)
    for name in ("seen", "out", "bits", "present", "num_present"):
        assert torch.equal(getattr(by_tensors, name), getattr(by_lists, name))


@pytest.mark.parametrize("backend", BACKENDS)
def test_present_lists_follow_arrivals_and_departures(backend: str) -> None:
    """Tokens are listed in the order they appear; one that leaves is replaced by the last."""
    counts = PenaltyCounts(2, 20)
    update_penalty_counts(counts, [0, 0, 0, 0, 1], [5, 9, 5, 2, 7], [1, 1, 1, 1, 1], [0, 0, 0, 0, 0], backend=backend)
    assert counts.present[0, :3].tolist() == [5, 9, 2] and counts.num_present.tolist() == [3, 1]
    update_penalty_counts(counts, [0, 0], [5, 9], [-1, -1], [0, 0], backend=backend)  # 5 stays (count 1)
    assert counts.present[0, :2].tolist() == [5, 2] and int(counts.num_present[0]) == 2
    update_penalty_counts(counts, [0, 0, 0], [5, 11, 2], [-1, 1, -1], [0, 0, 0], backend=backend)
    assert counts.present[0, :1].tolist() == [11] and int(counts.num_present[0]) == 1
    counts.clear(0)
    assert int(counts.num_present[0]) == 0 and int(counts.num_present[1]) == 1


@pytest.mark.parametrize("backend", BACKENDS)
def test_bad_sequences(backend: str) -> None:
    counts = PenaltyCounts(1, 10)
    with pytest.raises(KernelArgumentError, match="tokens must be a sequence of 2 ints"):
        update_penalty_counts(counts, [0, 0], [1], [1, 1], [0, 0], backend=backend)
    with pytest.raises(KernelArgumentError, match="d_out must be a sequence"):
        update_penalty_counts(counts, [0], [1], [1], torch.zeros(1, dtype=torch.int32), backend=backend)
    with pytest.raises(KernelArgumentError, match="token 12"):
        update_penalty_counts(counts, [0], [12], [1], [0], backend=backend)
    if backend == "c":
        with pytest.raises(KernelArgumentError, match="must hold int32 integers"):
            update_penalty_counts(counts, [0], [2**40], [1], [0], backend=backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_params_object_equals_the_function(backend: str) -> None:
    rng = random.Random(4)
    histories, params = random_case(rng, 4, 300)
    counts = build(histories, 300, backend)
    logits = torch.randn(4, 300, generator=torch.Generator().manual_seed(2)) * 3
    slots = list(range(3, -1, -1))
    rp, fp, pp = ([p[i] for p in params] for i in range(3))
    want = logits.clone()
    apply_penalties(want, counts, torch.tensor(slots, dtype=torch.int32), repetition=torch.tensor(rp),
                    frequency=torch.tensor(fp), presence=torch.tensor(pp), backend=backend)
    got = logits.clone()
    PenaltyParams(slots, repetition=rp, frequency=fp, presence=pp).apply(got, counts, backend=backend)
    assert torch.equal(got.view(torch.int32), want.view(torch.int32))
    with pytest.raises(KernelArgumentError, match="logits has shape"):
        PenaltyParams(slots).apply(torch.zeros(3, 300), counts, backend=backend)
