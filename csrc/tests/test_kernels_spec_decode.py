"""Suffix matching: C against the Python fallback and a brute-force oracle, and bad arguments."""

from __future__ import annotations

from array import array

import pyagent_kernels
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pyagent_kernels.errors import KernelArgumentError
from pyagent_kernels.spec_decode import TokenHistories, suffix_match

needs_c = pytest.mark.skipif(not pyagent_kernels.status()["compiled"], reason="C extension not built")
tokens = st.lists(st.integers(-1, 3), min_size=0, max_size=60)


def oracle(text: list[int], pattern: list[int], min_len: int, max_len: int, max_hits: int) -> tuple[int, list[int]]:
    """Longest m whose pattern suffix ends at some e < len(text); hits by descending e (slices only)."""
    for m in range(min(max_len, len(pattern)), min_len - 1, -1):
        suffix = pattern[len(pattern) - m:]
        if any(t < 0 for t in suffix):
            continue
        hits = [e for e in range(len(text) - 1, m - 1, -1) if text[e - m:e] == suffix]
        if hits:
            return m, hits[:max_hits]
    return 0, []


@settings(max_examples=150, deadline=None)
@given(text=tokens, pattern=tokens, min_len=st.integers(1, 4), extra=st.integers(0, 5), max_hits=st.integers(1, 4),
       same=st.booleans())
def test_python_matches_oracle(text: list[int], pattern: list[int], min_len: int, extra: int, max_hits: int,
                               same: bool) -> None:
    pattern = text if same else pattern
    expected = oracle(text, pattern, min_len, min_len + extra, max_hits)
    assert suffix_match(text, pattern, min_len=min_len, max_len=min_len + extra, max_hits=max_hits,
                        backend="python") == expected


@needs_c
@settings(max_examples=150, deadline=None)
@given(text=tokens, pattern=tokens, min_len=st.integers(1, 4), extra=st.integers(0, 5), max_hits=st.integers(1, 4),
       same=st.booleans())
def test_c_matches_python(text: list[int], pattern: list[int], min_len: int, extra: int, max_hits: int,
                          same: bool) -> None:
    pattern = text if same else pattern
    args = {"min_len": min_len, "max_len": min_len + extra, "max_hits": max_hits}
    assert suffix_match(array("i", text), array("i", pattern), backend="c", **args) == suffix_match(
        text, pattern, backend="python", **args)


def test_self_match_excludes_the_trivial_occurrence() -> None:
    history = array("i", [5, 6, 7])
    assert suffix_match(history, history, backend="python") == (0, [])
    history = array("i", [5, 6, 7, 5, 6])
    assert suffix_match(history, history, max_hits=3) == (2, [2])


@pytest.mark.parametrize(("kwargs", "word"), [
    ({"min_len": 0}, "min_len"), ({"min_len": 3, "max_len": 2}, "max_len"), ({"max_hits": 0}, "max_hits"),
])
def test_bad_bounds_raise(kwargs: dict[str, int], word: str) -> None:
    with pytest.raises(KernelArgumentError, match=word):
        suffix_match([1, 2], [1, 2], **kwargs)


def test_token_outside_int32_raises() -> None:
    with pytest.raises(KernelArgumentError, match="int32"):
        suffix_match([2**40, 1], [1], backend="python")


def test_histories_copy_only_new_tokens() -> None:
    histories = TokenHistories()
    output: list[int] = []
    first = histories.sync("a", [1, 2], output)
    output.extend([3, 4])
    second = histories.sync("a", [1, 2], output)
    assert second is first and list(second) == [1, 2, 3, 4]
    assert histories.drop("a") is first and len(histories) == 0
