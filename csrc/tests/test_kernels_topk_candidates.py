"""The one-pass top-k path of apply_sampling_mask (a running bound and a candidate buffer that is
shrunk as the row streams by) against a brute-force numpy oracle, on rows long enough to shrink the
buffer many times: ties, -inf, fewer finite values than k, k >= vocab, temperature first or last
(including scales that collapse values into ties or overflow), and NaN / +inf anywhere."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import pyagent_kernels
from pyagent_kernels import Backend, KernelArgumentError
from pyagent_kernels.sampling import apply_sampling_mask

COMPILED = bool(pyagent_kernels.status()["compiled"])
BACKENDS: list[Backend] = ["c", "torch"] if COMPILED else ["torch"]
needs_c = pytest.mark.skipif(not COMPILED, reason="pyagent_kernels._C is not built")


def top_k_oracle(row: np.ndarray, k: int, t: float | None, t_last: bool) -> np.ndarray:
    """Sort the row: keep the values >= the k-th largest (after dividing by t first, in float32)."""
    x = row.astype(np.float32)
    scale = t is not None and t > 0 and t != 1
    if scale and not t_last:
        x = x / np.float32(t)
    if 0 < k < len(x):
        kth = np.sort(x)[::-1][k - 1]
        x = np.where(x >= kth, x, np.float32(-np.inf))
    if scale and t_last:
        x = x / np.float32(t)
    return x


def masked(logits: torch.Tensor, backend: Backend, **params: object) -> torch.Tensor:
    out = logits.clone()
    apply_sampling_mask(out, backend=backend, **params)  # type: ignore[arg-type]
    return out


def k_tensor(rows: int, k: int) -> torch.Tensor:
    return torch.full((rows,), k, dtype=torch.int32)


def assert_matches_oracle(logits: torch.Tensor, k: int, t: float | None = None, t_last: bool = False) -> None:
    rows = logits.shape[0]
    params: dict[str, object] = {"top_k": k_tensor(rows, k), "temperature_last": t_last}
    if t is not None:
        params["temperature"] = torch.full((rows,), t)
    want = torch.from_numpy(np.stack([top_k_oracle(r, k, t, t_last) for r in logits.numpy()]))
    for backend in BACKENDS:
        got = masked(logits, backend, **params)
        assert torch.equal(got.view(torch.int32), want.view(torch.int32)), backend


@pytest.mark.parametrize("vocab", [1, 63, 64, 65, 200, 1000, 4097, 49152])
@pytest.mark.parametrize("k", [1, 2, 50, 300, 5000])
def test_long_rows_match_a_full_sort(vocab: int, k: int) -> None:
    gen = torch.Generator().manual_seed(vocab * 7 + k)
    logits = torch.randn(3, vocab, generator=gen) * torch.tensor([[0.1], [2.5], [30.0]])
    assert_matches_oracle(logits, k)


@pytest.mark.parametrize("order", ["ascending", "descending"])
def test_sorted_rows_shrink_at_every_step(order: str) -> None:
    """Ascending values raise the k-th largest with every block (the most shrinks); descending
    values never admit a candidate after the first ones."""
    row = torch.arange(20000, dtype=torch.float32) / 100
    logits = (row if order == "ascending" else row.flip(0)).unsqueeze(0).contiguous()
    assert_matches_oracle(logits, 37)


@pytest.mark.parametrize("levels", [1, 2, 7])
@pytest.mark.parametrize("k", [1, 50, 900])
def test_heavy_ties_keep_every_tied_value(levels: int, k: int) -> None:
    gen = torch.Generator().manual_seed(levels * 31 + k)
    logits = torch.randint(0, levels, (4, 6000), generator=gen).float()
    logits[1, ::3] = -0.0  # signed zeros tie with +0.0
    assert_matches_oracle(logits, k)


def test_minus_inf_rows_and_fewer_finite_values_than_k() -> None:
    logits = torch.full((4, 5000), -math.inf)
    logits[1, [3, 4000, 4999]] = torch.tensor([1.0, 2.0, 1.0])  # 3 finite values, k = 50
    logits[2, ::2] = torch.randn(2500, generator=torch.Generator().manual_seed(2))
    logits[3, 4999] = 0.0
    assert_matches_oracle(logits, 50)
    out = masked(logits, BACKENDS[0], top_k=k_tensor(4, 50))
    assert torch.isneginf(out[0]).all()
    assert torch.isfinite(out[1]).sum() == 3


@pytest.mark.parametrize("k", [0, -3, 5000, 5001, 2**31 - 1])
def test_k_off_or_at_least_vocab_keeps_everything(k: int) -> None:
    logits = torch.randn(2, 5000, generator=torch.Generator().manual_seed(5))
    for backend in BACKENDS:
        assert torch.equal(masked(logits, backend, top_k=k_tensor(2, k)), logits)


@pytest.mark.parametrize("t", [0.7, 1.3, 1e-3, 1e3, 1e30, 1e-39])
@pytest.mark.parametrize("t_last", [False, True])
def test_temperature_first_or_last(t: float, t_last: bool) -> None:
    """Large temperatures squeeze distinct values into equal (or subnormal) quotients, which top-k
    then keeps together; tiny ones overflow to +inf, which is an error."""
    gen = torch.Generator().manual_seed(11)
    logits = torch.randn(2, 7000, generator=gen) * 3
    logits[1, :3000] = torch.linspace(1.0, 1.0 + 3000 * 1.2e-7, 3000)  # near-ties a division can merge
    overflows = t == 1e-39  # a subnormal float32: every logit above ~3.4e-1 overflows
    if overflows:
        for backend in BACKENDS:
            with pytest.raises(KernelArgumentError, match="logits row 0"):
                masked(logits, backend, top_k=k_tensor(2, 40), temperature=torch.full((2,), t),
                       temperature_last=t_last)
        return
    assert_matches_oracle(logits, 40, t, t_last)


@pytest.mark.parametrize("position", [0, 63, 64, 2047, 30000, 49151])
@pytest.mark.parametrize("bad", [math.nan, math.inf])
def test_nan_or_inf_anywhere_is_reported(position: int, bad: float) -> None:
    logits = torch.randn(3, 49152, generator=torch.Generator().manual_seed(position))
    logits[2, position] = bad
    for backend in BACKENDS:
        with pytest.raises(KernelArgumentError, match="logits row 2 contains NaN or \\+inf"):
            masked(logits, backend, top_k=k_tensor(3, 50))


@needs_c
@pytest.mark.parametrize("vocab", [49152, 151936])
def test_default_chain_c_equals_torch_on_every_isa(c_isa: str, vocab: int) -> None:
    """The benchmark's chain (top-k 50, top-p 0.9, min-p 0.05, temperature 0.8 last), bit for bit."""
    gen = torch.Generator().manual_seed(vocab)
    logits = torch.randn(4, vocab, generator=gen) * torch.tensor([[0.5], [2.5], [2.5], [9.0]])
    params = {"top_k": k_tensor(4, 50), "top_p": torch.full((4,), 0.9), "min_p": torch.full((4,), 0.05),
              "temperature": torch.full((4,), 0.8), "temperature_last": True}
    by_c, by_torch = masked(logits, "c", **params), masked(logits, "torch", **params)
    assert torch.equal(by_c.view(torch.int32), by_torch.view(torch.int32))


@needs_c
@settings(max_examples=60, deadline=None)
@given(data=st.data(), vocab=st.integers(200, 3000), k=st.integers(1, 400))
def test_property_long_rows_c_equals_torch(data: st.DataObject, vocab: int, k: int) -> None:
    """Rows drawn from a few values (ties at every cut-off) or a wide range, with every step on."""
    seed = data.draw(st.integers(0, 2**31 - 1))
    gen = torch.Generator().manual_seed(seed)
    if data.draw(st.booleans()):
        logits = torch.randint(-4, 4, (2, vocab), generator=gen).float()
    else:
        logits = torch.randn(2, vocab, generator=gen) * data.draw(st.floats(0.01, 50))
    logits[torch.rand(2, vocab, generator=gen) < data.draw(st.floats(0, 0.9))] = -math.inf
    unit = st.floats(0, 1, width=32)
    params = {
        "top_k": k_tensor(2, k),
        "top_p": torch.tensor([data.draw(unit), 1.0]),
        "min_p": torch.tensor([data.draw(unit), 0.0]),
        "temperature": torch.tensor([data.draw(st.floats(0.0625, 16, width=32)), 0.0]),
        "temperature_last": data.draw(st.booleans()),
    }
    by_c, by_torch = masked(logits, "c", **params), masked(logits, "torch", **params)
    assert torch.equal(by_c.view(torch.int32), by_torch.view(torch.int32))
