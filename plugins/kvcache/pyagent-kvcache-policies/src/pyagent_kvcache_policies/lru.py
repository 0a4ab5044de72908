"""Least recently used, on an ``OrderedDict``: every operation O(1)."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

from pyagent_core.interfaces.eviction import EvictionContext, EvictionPolicy


class LruPolicy(EvictionPolicy):
    """Evicts the block inserted or touched longest ago.

    A block a request takes (``remove``) and gives back (``insert``) comes back as the most recently
    used, which is what a use is. Pools that give a request's blocks back leaf first keep a chain's
    deeper blocks ahead of its shallower ones in the eviction order.
    """

    def __init__(self, options: Mapping[str, Any], context: EvictionContext) -> None:
        super().__init__(options, context)
        self.order: OrderedDict[int, None] = OrderedDict()

    def insert(self, block_id: int) -> None:
        """Track ``block_id`` as the most recently used block."""
        self.check_insert(block_id)
        self.order[block_id] = None

    def touch(self, block_id: int) -> None:
        """Make ``block_id`` the most recently used block."""
        self.check_present(block_id)
        self.order.move_to_end(block_id)

    def remove(self, block_id: int) -> None:
        """Stop tracking ``block_id``."""
        self.check_present(block_id)
        del self.order[block_id]

    def evict(self) -> int:
        """Stop tracking the least recently used block and return it."""
        self.check_not_empty()
        return self.order.popitem(last=False)[0]

    def __len__(self) -> int:
        return len(self.order)

    def __contains__(self, block_id: object) -> bool:
        return block_id in self.order
