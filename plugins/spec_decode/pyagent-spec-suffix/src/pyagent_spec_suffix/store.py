"""The global store: outputs of finished requests, concatenated with separators, oldest evicted first."""

from __future__ import annotations

from array import array
from collections import deque
from collections.abc import Sequence

SEPARATOR = -1
"""Between two stored outputs; never matches a token, so no match or continuation spans two outputs."""


class OutputStore:
    """Earlier outputs as one int32 buffer of at most ``max_tokens`` tokens (separators included).

    Adding an output that does not fit evicts the oldest ones; an output longer than the whole
    store keeps only its last tokens.
    """

    def __init__(self, max_tokens: int) -> None:
        self.max_tokens = max_tokens
        self.buffer = array("i")
        self._lengths: deque[int] = deque()

    def add(self, tokens: Sequence[int]) -> None:
        """Append one finished output (with its separator), evicting old outputs to stay in bounds."""
        if self.max_tokens < 2 or not tokens:
            return
        kept = tokens[-(self.max_tokens - 1):]
        size = len(kept) + 1
        drop = 0
        while self._lengths and len(self.buffer) - drop + size > self.max_tokens:
            drop += self._lengths.popleft()
        if drop:
            del self.buffer[:drop]
        self.buffer.extend(kept)
        self.buffer.append(SEPARATOR)
        self._lengths.append(size)

    def __len__(self) -> int:
        return len(self.buffer)
