"""Least frequently used, on frequency buckets: every operation O(1).

Counts saturate at ``max_frequency``; a bitmask of the non-empty buckets finds the lowest one in one
integer operation. A block a request takes keeps its count (see :mod:`.recall`) and comes back one
use higher. Within a count, the least recently used block goes first.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

from pyagent_core.interfaces.eviction import EvictionContext, EvictionPolicy
from pyagent_kvcache_policies.recall import Recall


class LfuPolicy(EvictionPolicy):
    """Evicts the block with the fewest uses (ties: the least recently used)."""

    def __init__(self, options: Mapping[str, Any], context: EvictionContext) -> None:
        super().__init__(options, context)
        self.max_frequency: int = self.options["max_frequency"]
        self.count: dict[int, int] = {}
        self.buckets: list[OrderedDict[int, None]] = [OrderedDict() for _ in range(self.max_frequency + 1)]
        self.nonempty = 0
        """Bit ``f`` is set when bucket ``f`` holds a block."""
        self.recall: Recall[int] = Recall(self.capacity)

    def _place(self, block_id: int, count: int) -> None:
        self.count[block_id] = count
        self.buckets[count][block_id] = None
        self.nonempty |= 1 << count

    def _unplace(self, block_id: int) -> int:
        count = self.count.pop(block_id)
        bucket = self.buckets[count]
        del bucket[block_id]
        if not bucket:
            self.nonempty &= ~(1 << count)
        return count

    def insert(self, block_id: int) -> None:
        """Track ``block_id`` with one use, or one more than it had when a request took it."""
        self.check_insert(block_id)
        before = self.recall.pop(block_id, None)
        self._place(block_id, 1 if before is None else min(before + 1, self.max_frequency))

    def touch(self, block_id: int) -> None:
        """Count one more use of ``block_id``."""
        self.check_present(block_id)
        self._place(block_id, min(self._unplace(block_id) + 1, self.max_frequency))

    def remove(self, block_id: int) -> None:
        """Stop tracking ``block_id``, remembering its count for when it comes back."""
        self.check_present(block_id)
        self.recall.keep(block_id, self._unplace(block_id))

    def forget(self, block_id: int) -> None:
        """Drop the remembered count of ``block_id``."""
        super().forget(block_id)
        self.recall.pop(block_id, None)

    def evict(self) -> int:
        """Stop tracking the least recently used of the least used blocks and return it."""
        self.check_not_empty()
        lowest = (self.nonempty & -self.nonempty).bit_length() - 1
        block_id = next(iter(self.buckets[lowest]))
        self._unplace(block_id)
        return block_id

    def __len__(self) -> int:
        return len(self.count)

    def __contains__(self, block_id: object) -> bool:
        return block_id in self.count
