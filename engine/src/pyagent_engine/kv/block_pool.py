"""The pool of KV-cache blocks shared by all requests."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable


class BlockPool:
    """Hands out free block ids and takes them back. Allocation is all-or-nothing."""

    def __init__(self, num_blocks: int) -> None:
        if num_blocks <= 0:
            raise ValueError(f"the KV cache needs at least one block, got {num_blocks}")
        self.num_blocks = num_blocks
        self._free: deque[int] = deque(range(num_blocks))

    @property
    def num_free(self) -> int:
        """Blocks not held by any request."""
        return len(self._free)

    def allocate(self, count: int) -> list[int] | None:
        """``count`` free block ids, or ``None`` (and nothing taken) when fewer are free."""
        if count > len(self._free):
            return None
        return [self._free.popleft() for _ in range(count)]

    def free(self, blocks: Iterable[int]) -> None:
        """Return ``blocks`` to the pool."""
        self._free.extend(blocks)
