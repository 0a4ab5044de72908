"""Suffix matching for model-free speculative proposers (prompt lookup, suffix decoding).

:func:`suffix_match` finds where the end of a token sequence occurred before, so a proposer can
draft what followed it there. Imports neither torch nor numpy: token sequences are ``array('i')``
buffers (passed to C without a copy) or any sequence of ints (copied once per call).
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from typing import Literal

from pyagent_kernels import _extension
from pyagent_kernels._spec_decode_py import suffix_match_py
from pyagent_kernels.errors import KernelArgumentError

__all__ = ["TokenHistories", "suffix_match"]


def _int32_buffer(tokens: Sequence[int], name: str) -> array:
    if isinstance(tokens, array) and tokens.typecode == "i" and tokens.itemsize == 4:
        return tokens
    try:
        return array("i", tokens)
    except (TypeError, OverflowError) as exc:
        raise KernelArgumentError(f"{name} must be a sequence of int32 token ids ({exc})") from None


def suffix_match(
    text: Sequence[int],
    pattern: Sequence[int],
    *,
    min_len: int = 1,
    max_len: int = 64,
    max_hits: int = 1,
    backend: Literal["auto", "c", "python"] = "auto",
) -> tuple[int, list[int]]:
    """Where the longest suffix of ``pattern`` occurred in ``text`` followed by another token.

    Looks for the largest ``m`` in ``[min_len, max_len]`` such that the last ``m`` tokens of
    ``pattern`` equal ``text[e - m:e]`` for some ``1 <= e <= len(text) - 1`` (so ``text[e]``, the
    first token of the continuation, exists). Passing the same sequence as ``text`` and
    ``pattern`` searches a history for earlier occurrences of its own end. Negative ids never match
    (use -1 to separate concatenated sequences).

    Args:
        text: where to search; int32 token ids (``array('i')`` avoids a copy).
        pattern: whose suffix to look for.
        min_len: the shortest match worth reporting (>= 1).
        max_len: the longest match measured (>= min_len).
        max_hits: the most end positions returned (>= 1).
        backend: "auto" (C if built, else Python with a one-time warning), "c" or "python".

    Returns:
        ``(match_len, hits)``: the match length (0 when nothing matched) and up to ``max_hits``
        end positions ``e`` of matches of that length, most recent first.

    Raises:
        KernelArgumentError: a length bound is out of range or a token does not fit int32.
    """
    if not (isinstance(min_len, int) and min_len >= 1):
        raise KernelArgumentError(f"suffix_match: min_len must be an integer >= 1, got {min_len!r}")
    if not (isinstance(max_len, int) and max_len >= min_len):
        raise KernelArgumentError(f"suffix_match: max_len must be an integer >= min_len ({min_len}), got {max_len!r}")
    if not (isinstance(max_hits, int) and max_hits >= 1):
        raise KernelArgumentError(f"suffix_match: max_hits must be an integer >= 1, got {max_hits!r}")
    text_buf = _int32_buffer(text, "text")
    pattern_buf = text_buf if pattern is text else _int32_buffer(pattern, "pattern")
    if _extension.resolve("torch" if backend == "python" else backend, "suffix_match") == "torch":
        return suffix_match_py(text_buf, pattern_buf, min_len, max_len, max_hits)
    ffi, lib = _extension.require()
    hits = ffi.new("int64_t[]", max_hits)
    match_len = ffi.new("int64_t *")
    empty = ffi.NULL
    count = lib.pak_suffix_match_i32(
        ffi.from_buffer("int32_t[]", text_buf) if len(text_buf) else empty, len(text_buf),
        ffi.from_buffer("int32_t[]", pattern_buf) if len(pattern_buf) else empty, len(pattern_buf),
        min_len, max_len, max_hits, hits, match_len,
    )
    _extension.check_status(int(count) if count < 0 else 0, "suffix_match")
    return int(match_len[0]), [int(hits[i]) for i in range(count)]


class TokenHistories:
    """Per-request int32 buffers of prompt + output, kept in step with the engine's token lists.

    A proposer calls :meth:`sync` with the request's current tokens each step; only the tokens
    appended since the previous call are copied, so the buffer handed to :func:`suffix_match`
    costs O(new tokens) per step.
    """

    def __init__(self) -> None:
        self._buffers: dict[str, array] = {}

    def sync(self, request_id: str, prompt: Sequence[int], output: Sequence[int]) -> array:
        """The request's history buffer, extended with the tokens it does not hold yet."""
        buffer = self._buffers.get(request_id)
        if buffer is None or len(buffer) > len(prompt) + len(output):
            buffer = self._buffers[request_id] = array("i", prompt)
        have = len(buffer) - len(prompt)
        if have < len(output):
            buffer.extend(output[have:])
        return buffer

    def drop(self, request_id: str) -> array | None:
        """Forget a request; return its buffer (``None`` when it had none)."""
        return self._buffers.pop(request_id, None)

    def __len__(self) -> int:
        return len(self._buffers)
