"""First in, first out: evicts the block cached longest ago, whatever its use since (O(1) amortised)."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

from pyagent_core.interfaces.eviction import EvictionContext, EvictionPolicy


class FifoPolicy(EvictionPolicy):
    """Evicts in the order blocks were first inserted; uses do not reorder them.

    A block a request takes keeps its place in the queue while it is in use (a placeholder), so
    giving it back does not make it young again. A placeholder that reaches the head while its block
    is still in use is dropped: that block queues again from the tail when it comes back. At most
    ``capacity`` placeholders are kept (the oldest go first), so memory stays bounded.
    """

    def __init__(self, options: Mapping[str, Any], context: EvictionContext) -> None:
        super().__init__(options, context)
        self.queue: OrderedDict[int, bool] = OrderedDict()
        """Block id -> present (``False``: a placeholder for a taken block), oldest first."""
        self.taken: OrderedDict[int, None] = OrderedDict()
        self.size = 0

    def insert(self, block_id: int) -> None:
        """Queue ``block_id`` at the tail, or back in its old place if a request took it."""
        self.check_insert(block_id)
        if block_id in self.taken:
            del self.taken[block_id]
        self.queue[block_id] = True
        self.size += 1

    def touch(self, block_id: int) -> None:
        """Nothing to reorder: FIFO ignores uses."""
        self.check_present(block_id)

    def remove(self, block_id: int) -> None:
        """Stop tracking ``block_id``, keeping its place in the queue in case it comes back."""
        self.check_present(block_id)
        self.queue[block_id] = False
        self.size -= 1
        self.taken[block_id] = None
        if len(self.taken) > self.capacity:
            del self.queue[self.taken.popitem(last=False)[0]]

    def forget(self, block_id: int) -> None:
        """Drop the placeholder of ``block_id``, if any."""
        super().forget(block_id)
        if block_id in self.taken:
            del self.taken[block_id]
            del self.queue[block_id]

    def evict(self) -> int:
        """Stop tracking the oldest present block and return it (dropping older placeholders)."""
        self.check_not_empty()
        while True:
            block_id, present = self.queue.popitem(last=False)
            if present:
                self.size -= 1
                return block_id
            del self.taken[block_id]

    def __len__(self) -> int:
        return self.size

    def __contains__(self, block_id: object) -> bool:
        return self.queue.get(block_id, False)  # type: ignore[call-overload]
