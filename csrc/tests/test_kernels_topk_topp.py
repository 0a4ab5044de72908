"""apply_sampling_mask: the C kernel (every ISA variant) is bit-identical to the torch fallback."""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import pyagent_kernels
from pyagent_kernels import Backend, KernelArgumentError
from pyagent_kernels.sampling import apply_sampling_mask

COMPILED = bool(pyagent_kernels.status()["compiled"])
needs_c = pytest.mark.skipif(not COMPILED, reason="pyagent_kernels._C is not built")
INF = math.inf
Params = dict[str, torch.Tensor | None]


def apply_with(logits: torch.Tensor, params: Params, backend: Backend) -> None:
    """Mask ``logits`` in place with the parameters in ``params``."""
    apply_sampling_mask(
        logits,
        temperature=params.get("temperature"),
        top_k=params.get("top_k"),
        top_p=params.get("top_p"),
        min_p=params.get("min_p"),
        backend=backend,
    )


def run(logits: torch.Tensor, params: Params, backend: Backend) -> torch.Tensor:
    """A masked copy of ``logits``."""
    out = logits.clone()
    apply_with(out, params, backend)
    return out


def assert_c_equals_torch(logits: torch.Tensor, params: Params) -> None:
    """Both backends give bitwise identical results."""
    by_c, by_torch = run(logits, params, "c"), run(logits, params, "torch")
    assert torch.equal(by_c.view(torch.int32), by_torch.view(torch.int32)), (
        f"rows differ: {(by_c != by_torch).any(dim=1).nonzero().flatten().tolist()}"
    )


def random_params(rows: int, vocab: int, gen: torch.Generator) -> Params:
    """Per-row parameters mixing disabled, edge and typical values."""
    temperature = torch.tensor([0.0, 1.0, 0.7, 1.3, -1.0, 0.05])[torch.randint(0, 6, (rows,), generator=gen)]
    top_k = torch.randint(-2, vocab + 3, (rows,), generator=gen, dtype=torch.int32)
    top_k[torch.rand(rows, generator=gen) < 0.3] = 0
    top_p = torch.rand(rows, generator=gen)
    top_p[torch.rand(rows, generator=gen) < 0.2] = 1.0
    top_p[torch.rand(rows, generator=gen) < 0.1] = 0.0
    min_p = torch.rand(rows, generator=gen) * 0.3
    min_p[torch.rand(rows, generator=gen) < 0.4] = 0.0
    min_p[torch.rand(rows, generator=gen) < 0.05] = 1.0
    return {"temperature": temperature, "top_k": top_k, "top_p": top_p, "min_p": min_p}


def random_logits(rows: int, vocab: int, gen: torch.Generator, scale: float = 3.0) -> torch.Tensor:
    """Gaussian logits with about 5% -inf."""
    logits = torch.randn(rows, vocab, generator=gen) * scale
    logits[torch.rand(rows, vocab, generator=gen) < 0.05] = -INF
    return logits


@needs_c
@pytest.mark.parametrize("vocab", [1, 2, 7, 31, 32, 33, 100, 1000, 4097, 50000])
def test_random_rows_every_isa(c_isa: str, vocab: int) -> None:
    gen = torch.Generator().manual_seed(vocab)
    for rows in (1, 9):
        for scale in (0.5, 3.0, 20.0):
            assert_c_equals_torch(random_logits(rows, vocab, gen, scale), random_params(rows, vocab, gen))


@needs_c
@pytest.mark.parametrize(
    "params",
    [
        {},
        {"temperature": [0.5]},
        {"top_k": [1]},
        {"top_k": [999]},
        {"top_k": [1000]},
        {"top_k": [5000]},
        {"top_k": [-1]},
        {"top_p": [0.0]},
        {"top_p": [1.0]},
        {"top_p": [0.999999]},
        {"top_p": [1e-7]},
        {"min_p": [1.0]},
        {"min_p": [1e-30]},
        {"top_k": [10], "top_p": [0.0]},
        {"top_k": [300], "top_p": [0.95], "min_p": [0.01], "temperature": [0.6]},
    ],
    ids=repr,
)
def test_edge_parameters(c_isa: str, params: dict[str, list[float]]) -> None:
    gen = torch.Generator().manual_seed(1)
    tensors: Params = {
        name: torch.tensor(value, dtype=torch.int32 if name == "top_k" else torch.float32)
        for name, value in params.items()
    }
    assert_c_equals_torch(random_logits(1, 1000, gen), tensors)


@needs_c
def test_ties_and_signed_zeros(c_isa: str) -> None:
    gen = torch.Generator().manual_seed(3)
    logits = torch.randint(-3, 3, (40, 300), generator=gen).float()
    logits[logits == 0] = torch.tensor([0.0, -0.0])[
        torch.randint(0, 2, (int((logits == 0).sum()),), generator=gen)
    ]
    assert_c_equals_torch(logits, random_params(40, 300, gen))


@needs_c
def test_special_rows(c_isa: str) -> None:
    rows = torch.tensor(
        [
            [-INF] * 40,  # all banned: left as is
            [0.0] + [-INF] * 39,  # one finite token
            [5.0] * 40,  # all tied
            [1e30, -1e30] * 20,  # huge spread
            [1.0, 2.0] + [-INF] * 38,
        ]
    )
    params: Params = {
        "top_k": torch.tensor([3, 3, 3, 3, 1], dtype=torch.int32),
        "top_p": torch.tensor([0.5, 0.5, 0.5, 0.5, 0.5]),
        "min_p": torch.tensor([0.1, 0.1, 0.1, 0.1, 0.0]),
    }
    assert_c_equals_torch(rows, params)
    out = run(rows, params, "c")
    assert torch.isneginf(out[0]).all()
    assert torch.isfinite(out[1]).sum() == 1
    assert torch.isfinite(out[2]).all()  # ties with the k-th value are kept
    assert torch.isfinite(out[4]).tolist() == [False, True] + [False] * 38


@pytest.mark.parametrize("backend", ["c", "torch"])
def test_temperature_divides_kept_logits(backend: Backend) -> None:
    if backend == "c" and not COMPILED:
        pytest.skip("pyagent_kernels._C is not built")
    logits = torch.tensor([[1.0, 2.0, 3.0], [1.0, 2.0, 3.0], [1.0, 2.0, 3.0]])
    apply_sampling_mask(logits, temperature=torch.tensor([0.5, 0.0, -2.0]), backend=backend)
    assert logits.tolist() == [[2.0, 4.0, 6.0], [1.0, 2.0, 3.0], [1.0, 2.0, 3.0]]


@needs_c
@pytest.mark.parametrize("threads", [1, 3, 8])
def test_threads_give_the_same_result(c_isa: str, threads: int) -> None:
    gen = torch.Generator().manual_seed(threads)
    logits, params = random_logits(37, 20000, gen), random_params(37, 20000, gen)
    out = logits.clone()
    apply_sampling_mask(out, backend="c", threads=threads, **params)
    assert torch.equal(out.view(torch.int32), run(logits, params, "torch").view(torch.int32))


@needs_c
def test_threads_report_the_first_bad_row() -> None:
    logits = torch.zeros(40, 20000)  # four threads of ten rows
    logits[31, 5] = float("nan")
    logits[12, 7] = INF
    with pytest.raises(KernelArgumentError, match="logits row 12 "):
        apply_sampling_mask(logits, top_p=torch.full((40,), 0.5), backend="c", threads=4)


@pytest.mark.parametrize("threads", [0, -2, 1.5])
def test_bad_thread_count(threads: int) -> None:
    with pytest.raises(KernelArgumentError, match="must be a positive int"):
        apply_sampling_mask(torch.zeros(1, 4), threads=threads, backend="torch")


@needs_c
@settings(max_examples=300, deadline=None)
@given(data=st.data(), rows=st.integers(1, 3), vocab=st.integers(1, 70))
def test_property_c_equals_torch(data: st.DataObject, rows: int, vocab: int) -> None:
    value = st.sampled_from([-INF, 0.0, -0.0, 1.0, -1.0, 2.5]) | st.floats(-50, 50, width=32)
    logits = torch.tensor(data.draw(st.lists(value, min_size=rows * vocab, max_size=rows * vocab)))
    logits = logits.view(rows, vocab)

    def per_row(
        elements: st.SearchStrategy[float] | st.SearchStrategy[int], dtype: torch.dtype
    ) -> torch.Tensor | None:
        """A drawn tensor of ``rows`` parameters, or None."""
        drawn = data.draw(st.none() | st.lists(elements, min_size=rows, max_size=rows))
        return None if drawn is None else torch.tensor(drawn, dtype=dtype)

    unit = st.sampled_from([0.0, 1.0, 0.5]) | st.floats(0, 1, width=32)
    params: Params = {
        "temperature": per_row(
            st.sampled_from([0.0, 1.0, -1.0, 0.5]) | st.floats(0.0625, 10, width=32), torch.float32
        ),
        "top_k": per_row(st.integers(-1, vocab + 1), torch.int32),
        "top_p": per_row(unit, torch.float32),
        "min_p": per_row(unit, torch.float32),
    }
    assert_c_equals_torch(logits, params)


def _logits() -> torch.Tensor:
    return torch.zeros(2, 10)


BAD_ARGUMENTS = [
    (
        "bf16 logits",
        lambda: (torch.zeros(2, 10, dtype=torch.bfloat16), {}),
        "logits has dtype torch.bfloat16",
    ),
    ("3-D logits", lambda: (torch.zeros(2, 10, 1), {}), "logits has shape (2, 10, 1)"),
    ("strided logits", lambda: (torch.zeros(10, 2).t(), {}), "logits is not contiguous"),
    (
        "int64 top_k",
        lambda: (_logits(), {"top_k": torch.ones(2, dtype=torch.int64)}),
        "top_k has dtype torch.int64",
    ),
    ("float64 top_p", lambda: (_logits(), {"top_p": torch.ones(2, dtype=torch.float64)}), "top_p has dtype"),
    ("short min_p", lambda: (_logits(), {"min_p": torch.zeros(1)}), "min_p has shape (1,); expected (2,)"),
    (
        "strided temperature",
        lambda: (_logits(), {"temperature": torch.ones(4)[::2]}),
        "temperature is not contiguous",
    ),
    (
        "top_p above 1",
        lambda: (_logits(), {"top_p": torch.tensor([1.0, 1.5])}),
        r"top_p[1] = 1.5 must lie in [0, 1]",
    ),
    ("nan top_p", lambda: (_logits(), {"top_p": torch.tensor([float("nan"), 1.0])}), r"top_p[0] = nan"),
    ("negative min_p", lambda: (_logits(), {"min_p": torch.tensor([0.0, -0.1])}), r"min_p[1] = -0.1"),
    (
        "inf temperature",
        lambda: (_logits(), {"temperature": torch.tensor([1.0, INF])}),
        r"temperature[1] = inf",
    ),
]


def _escape(text: str) -> str:
    return "".join("\\" + c if c in "()[]." else c for c in text)


@pytest.mark.parametrize("backend", ["c", "torch"])
@pytest.mark.parametrize(("label", "make", "message"), BAD_ARGUMENTS, ids=[case[0] for case in BAD_ARGUMENTS])
def test_bad_arguments_raise_before_writing(
    backend: Backend, label: str, make: Callable[[], tuple[torch.Tensor, Params]], message: str
) -> None:
    if backend == "c" and not COMPILED:
        pytest.skip("pyagent_kernels._C is not built")
    logits, params = make()
    logits[0, 0] = 3.0
    before = logits.clone()
    with pytest.raises(KernelArgumentError, match=_escape(message)):
        apply_with(logits, params, backend)
    assert torch.equal(logits, before)


@pytest.mark.parametrize("backend", ["c", "torch"])
@pytest.mark.parametrize("bad", [float("nan"), INF])
def test_nan_or_inf_logits_name_the_row(backend: Backend, bad: float) -> None:
    if backend == "c" and not COMPILED:
        pytest.skip("pyagent_kernels._C is not built")
    logits = torch.zeros(3, 10)
    logits[1, 4] = bad
    with pytest.raises(KernelArgumentError, match="logits row 1 contains NaN or \\+inf"):
        apply_sampling_mask(logits, top_k=torch.ones(3, dtype=torch.int32), backend=backend)


@pytest.mark.parametrize("backend", ["c", "torch"])
def test_overflow_after_temperature_is_reported(backend: Backend) -> None:
    if backend == "c" and not COMPILED:
        pytest.skip("pyagent_kernels._C is not built")
    logits = torch.tensor([[3e38, 0.0]])
    with pytest.raises(KernelArgumentError, match="logits row 0"):
        apply_sampling_mask(logits, temperature=torch.tensor([0.5]), backend=backend)


@pytest.mark.parametrize("backend", ["c", "torch"])
def test_empty_inputs_are_a_no_op(backend: Backend) -> None:
    if backend == "c" and not COMPILED:
        pytest.skip("pyagent_kernels._C is not built")
    apply_sampling_mask(torch.empty(0, 10), top_k=torch.empty(0, dtype=torch.int32), backend=backend)
    apply_sampling_mask(torch.empty(3, 0), top_p=torch.full((3,), 0.5), backend=backend)


@needs_c
@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 10**6), rows=st.integers(1, 5), vocab=st.integers(1, 700))
def test_temperature_last_c_equals_torch_and_separate_steps(seed: int, rows: int, vocab: int) -> None:
    """temperature_last: C equals torch bitwise, and equals the mask without temperature followed
    by dividing the rows with t > 0, t != 1."""
    gen = torch.Generator().manual_seed(seed)
    logits = torch.randn(rows, vocab, generator=gen) * 3
    params = random_params(rows, vocab, gen)
    params["temperature"] = params["temperature"].clamp(min=-1.0).where(params["temperature"] != 0.05, 0.5)
    outs = {}
    for backend in ("c", "torch"):
        out = logits.clone()
        apply_sampling_mask(out, temperature_last=True, backend=backend, **params)
        outs[backend] = out
    assert torch.equal(outs["c"].view(torch.int32), outs["torch"].view(torch.int32))
    separate = run(logits, {**params, "temperature": None}, "c")
    t = params["temperature"]
    separate.div_(torch.where((t > 0) & (t != 1), t, 1.0).unsqueeze(1))
    assert torch.equal(outs["c"].view(torch.int32), separate.view(torch.int32))
