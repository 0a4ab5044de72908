"""Pure-Python suffix matching: the fallback of :func:`pyagent_kernels.spec_decode.suffix_match`.

The same backward scan as ``kernels/spec_decode/suffix_match.c``, step for step, so both give the
same match length and the same hits in the same order.
"""

from __future__ import annotations

from collections.abc import Sequence


def suffix_match_py(
    text: Sequence[int], pattern: Sequence[int], min_len: int, max_len: int, max_hits: int
) -> tuple[int, list[int]]:
    """``(match_len, hits)``; see :func:`pyagent_kernels.spec_decode.suffix_match`."""
    text_len, pattern_len = len(text), len(pattern)
    if pattern_len < min_len or text_len < 2:
        return 0, []
    cap = min(max_len, pattern_len)
    last = pattern[-1]
    if last < 0:
        return 0, []
    best = min_len - 1
    hits: list[int] = []
    for e in range(text_len - 1, 0, -1):
        if text[e - 1] != last:
            continue
        limit = min(cap, e)
        m = 1
        while m < limit and text[e - 1 - m] == pattern[pattern_len - 1 - m] and text[e - 1 - m] >= 0:
            m += 1
        if m > best:
            best, hits = m, [e]
        elif m == best and hits and len(hits) < max_hits:
            hits.append(e)
    return (best if hits else 0), hits
