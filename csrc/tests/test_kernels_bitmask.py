"""apply_token_bitmask: C kernel (every ISA variant) vs torch fallback vs a numpy reference."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import pyagent_kernels
from pyagent_kernels import Backend, KernelArgumentError
from pyagent_kernels.grammar import apply_token_bitmask

COMPILED = bool(pyagent_kernels.status()["compiled"])
needs_c = pytest.mark.skipif(not COMPILED, reason="pyagent_kernels._C is not built")
BITS_VIEW = {torch.float32: torch.int32, torch.bfloat16: torch.int16, torch.float16: torch.int16}


def numpy_reference(logits: torch.Tensor, bitmask: torch.Tensor, indices: list[int] | None) -> torch.Tensor:
    """Expected result, computed independently with numpy's bit unpacking."""
    rows, vocab = logits.shape
    allowed = np.unpackbits(bitmask.numpy().view(np.uint8), axis=1, bitorder="little")[:, :vocab].astype(bool)
    out = logits.clone()
    for r in range(rows) if indices is None else sorted(set(indices)):
        out[r, torch.from_numpy(~allowed[r])] = float("-inf")
    return out


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Bitwise equality (tells -0.0 from 0.0 and compares NaN payloads)."""
    return a.dtype == b.dtype and torch.equal(a.view(BITS_VIEW[a.dtype]), b.view(BITS_VIEW[b.dtype]))


def random_case(rows: int, vocab: int, dtype: torch.dtype, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Logits with a few -inf and NaN, and a bitmask mixing all-allowed, all-banned and random words."""
    gen = torch.Generator().manual_seed(seed)
    logits = torch.randn(rows, vocab, generator=gen).to(dtype)
    logits.view(-1)[torch.randint(0, rows * vocab, (max(1, rows * vocab // 50),), generator=gen)] = float(
        "-inf"
    )
    logits.view(-1)[torch.randint(0, rows * vocab, (1,), generator=gen)] = float("nan")
    words = (vocab + 31) // 32
    bitmask = torch.randint(-(2**31), 2**31, (rows, words), generator=gen, dtype=torch.int64).to(torch.int32)
    kind = torch.randint(0, 3, (rows, words), generator=gen)
    bitmask[kind == 0] = -1
    bitmask[kind == 1] = 0
    return logits, bitmask


VOCABS = [1, 5, 31, 32, 33, 64, 100, 1000, 4099]
DTYPES = [torch.float32, torch.bfloat16, torch.float16]


@pytest.mark.parametrize("vocab", VOCABS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("rows", [1, 3])
def test_torch_fallback_matches_numpy(rows: int, vocab: int, dtype: torch.dtype) -> None:
    logits, bitmask = random_case(rows, vocab, dtype, seed=vocab * rows)
    expected = numpy_reference(logits, bitmask, None)
    apply_token_bitmask(logits, bitmask, backend="torch")
    assert same_bits(logits, expected)


@needs_c
@pytest.mark.parametrize("vocab", VOCABS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("rows", [1, 3])
def test_c_matches_torch(c_isa: str, rows: int, vocab: int, dtype: torch.dtype) -> None:
    logits, bitmask = random_case(rows, vocab, dtype, seed=vocab + rows)
    expected = logits.clone()
    apply_token_bitmask(expected, bitmask, backend="torch")
    apply_token_bitmask(logits, bitmask, backend="c")
    assert same_bits(logits, expected)


@pytest.mark.parametrize("backend", ["c", "torch"])
@pytest.mark.parametrize("index_dtype", [torch.int32, torch.int64])
@pytest.mark.parametrize("indices", [[], [2], [0, 3], [3, 3, 1]])
def test_indices_mask_only_listed_rows(
    backend: Backend, index_dtype: torch.dtype, indices: list[int]
) -> None:
    if backend == "c" and not COMPILED:
        pytest.skip("pyagent_kernels._C is not built")
    logits, bitmask = random_case(4, 70, torch.float32, seed=7)
    expected = numpy_reference(logits, bitmask, indices)
    apply_token_bitmask(logits, bitmask, torch.tensor(indices, dtype=index_dtype), backend=backend)
    assert same_bits(logits, expected)


@pytest.mark.parametrize("backend", ["c", "torch"])
def test_all_allowed_and_all_banned(backend: Backend) -> None:
    if backend == "c" and not COMPILED:
        pytest.skip("pyagent_kernels._C is not built")
    logits = torch.randn(2, 40)
    original = logits.clone()
    bitmask = torch.tensor([[-1, -1], [0, 0]], dtype=torch.int32)
    apply_token_bitmask(logits, bitmask, backend=backend)
    assert torch.equal(logits[0], original[0])
    assert torch.isneginf(logits[1]).all()


@pytest.mark.parametrize("backend", ["c", "torch"])
def test_empty_inputs_are_a_no_op(backend: Backend) -> None:
    if backend == "c" and not COMPILED:
        pytest.skip("pyagent_kernels._C is not built")
    apply_token_bitmask(torch.empty(0, 10), torch.empty(0, 1, dtype=torch.int32), backend=backend)
    logits = torch.empty(2, 0)
    apply_token_bitmask(logits, torch.empty(2, 0, dtype=torch.int32), backend=backend)


@needs_c
@settings(max_examples=150, deadline=None)
@given(
    rows=st.integers(1, 4),
    vocab=st.integers(1, 130),
    dtype=st.sampled_from(DTYPES),
    data=st.data(),
)
def test_property_c_torch_numpy_agree(rows: int, vocab: int, dtype: torch.dtype, data: st.DataObject) -> None:
    words = (vocab + 31) // 32
    word = st.one_of(st.just(-1), st.just(0), st.integers(-(2**31), 2**31 - 1))
    bitmask = torch.tensor(
        data.draw(st.lists(st.lists(word, min_size=words, max_size=words), min_size=rows, max_size=rows)),
        dtype=torch.int32,
    )
    indices = data.draw(st.none() | st.lists(st.integers(0, rows - 1), max_size=6))
    logits = (
        torch.tensor(
            data.draw(
                st.lists(
                    st.floats(-1e4, 1e4, width=32) | st.just(float("-inf")),
                    min_size=rows * vocab,
                    max_size=rows * vocab,
                )
            ),
            dtype=torch.float32,
        )
        .view(rows, vocab)
        .to(dtype)
    )
    index_tensor = None if indices is None else torch.tensor(indices, dtype=torch.int64)
    expected = numpy_reference(logits, bitmask, indices)
    by_torch, by_c = logits.clone(), logits.clone()
    apply_token_bitmask(by_torch, bitmask, index_tensor, backend="torch")
    apply_token_bitmask(by_c, bitmask, index_tensor, backend="c")
    assert same_bits(by_torch, expected)
    assert same_bits(by_c, expected)


def _good() -> tuple[torch.Tensor, torch.Tensor]:
    return torch.zeros(2, 40), torch.zeros(2, 2, dtype=torch.int32)


BAD_ARGUMENTS = [
    (
        "float64 logits",
        lambda: (torch.zeros(2, 40, dtype=torch.float64), _good()[1], None),
        "dtype torch.float64",
    ),
    ("1-D logits", lambda: (torch.zeros(40), torch.zeros(2, dtype=torch.int32), None), "shape (40,)"),
    ("int64 bitmask", lambda: (_good()[0], torch.zeros(2, 2, dtype=torch.int64), None), "bitmask has dtype"),
    ("too few words", lambda: (_good()[0], torch.zeros(2, 1, dtype=torch.int32), None), "expected (2, 2)"),
    ("too many words", lambda: (_good()[0], torch.zeros(2, 3, dtype=torch.int32), None), "expected (2, 2)"),
    ("row mismatch", lambda: (_good()[0], torch.zeros(3, 2, dtype=torch.int32), None), "expected (2, 2)"),
    ("strided logits", lambda: (torch.zeros(2, 80)[:, ::2], _good()[1], None), "logits is not contiguous"),
    (
        "transposed bitmask",
        lambda: (_good()[0], torch.zeros(2, 2, dtype=torch.int32).t(), None),
        "not contiguous",
    ),
    ("float indices", lambda: (*_good(), torch.zeros(1)), "indices has dtype"),
    ("2-D indices", lambda: (*_good(), torch.zeros(1, 1, dtype=torch.int64)), "indices has shape"),
    ("meta logits", lambda: (torch.zeros(2, 40, device="meta"), _good()[1], None), "device meta"),
    ("list logits", lambda: ([[0.0] * 40] * 2, _good()[1], None), "must be a torch.Tensor"),
    ("grad logits", lambda: (torch.zeros(2, 40, requires_grad=True), _good()[1], None), "requires grad"),
    (
        "index too big",
        lambda: (*_good(), torch.tensor([0, 2], dtype=torch.int32)),
        "indices[1] = 2 is outside [0, 2)",
    ),
    ("negative index", lambda: (*_good(), torch.tensor([-1])), "indices[0] = -1 is outside [0, 2)"),
]


@pytest.mark.parametrize("backend", ["c", "torch"])
@pytest.mark.parametrize(("label", "make", "message"), BAD_ARGUMENTS, ids=[case[0] for case in BAD_ARGUMENTS])
def test_bad_arguments_raise_before_writing(
    backend: Backend, label: str, make: Callable[[], tuple[Any, Any, Any]], message: str
) -> None:
    if backend == "c" and not COMPILED:
        pytest.skip("pyagent_kernels._C is not built")
    logits, bitmask, indices = make()
    before = logits.clone() if isinstance(logits, torch.Tensor) and logits.device.type == "cpu" else None
    with pytest.raises(
        KernelArgumentError, match=message.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")
    ):
        apply_token_bitmask(logits, bitmask, indices, backend=backend)
    if before is not None:
        assert torch.equal(logits, before)


def test_unknown_backend_is_rejected() -> None:
    with pytest.raises(KernelArgumentError, match="backend='cuda' is not one of auto, c, torch"):
        apply_token_bitmask(*_good(), backend="cuda")  # type: ignore[arg-type]
