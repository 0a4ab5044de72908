"""Segmented LRU: a probationary and a protected LRU segment, every operation O(1)."""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

from pyagent_core.interfaces.eviction import EvictionContext, EvictionPolicy
from pyagent_kvcache_policies.recall import Recall


class SlruPolicy(EvictionPolicy):
    """New blocks enter probation; a block used again (touched, or given back after a request took
    it) moves to the protected segment, whose overflow falls back to probation. Evicts probation's
    least recently used block, or protected's when probation is empty.

    Option ``protected_fraction``: the share of ``capacity`` the protected segment may hold.
    """

    def __init__(self, options: Mapping[str, Any], context: EvictionContext) -> None:
        super().__init__(options, context)
        self.protected_size = max(1, math.floor(self.options["protected_fraction"] * self.capacity))
        self.probation: OrderedDict[int, None] = OrderedDict()
        self.protected: OrderedDict[int, None] = OrderedDict()
        self.recall: Recall[bool] = Recall(self.capacity)

    def _protect(self, block_id: int) -> None:
        self.protected[block_id] = None
        if len(self.protected) > self.protected_size:
            self.probation[self.protected.popitem(last=False)[0]] = None

    def insert(self, block_id: int) -> None:
        """New blocks go to probation; a block a request took and gives back is protected."""
        self.check_insert(block_id)
        if self.recall.pop(block_id, None) is None:
            self.probation[block_id] = None
        else:
            self._protect(block_id)

    def touch(self, block_id: int) -> None:
        """Make ``block_id`` the most recently used protected block."""
        self.check_present(block_id)
        if block_id in self.probation:
            del self.probation[block_id]
            self._protect(block_id)
        else:
            self.protected.move_to_end(block_id)

    def remove(self, block_id: int) -> None:
        """Stop tracking ``block_id``; when it comes back it is protected."""
        self.check_present(block_id)
        if self.probation.pop(block_id, True) is not None:
            del self.protected[block_id]
        self.recall.keep(block_id, True)

    def forget(self, block_id: int) -> None:
        """Forget that a request took ``block_id``."""
        super().forget(block_id)
        self.recall.pop(block_id, None)

    def evict(self) -> int:
        """Stop tracking probation's least recently used block (protected's if none) and return it."""
        self.check_not_empty()
        segment = self.probation or self.protected
        return segment.popitem(last=False)[0]

    def __len__(self) -> int:
        return len(self.probation) + len(self.protected)

    def __contains__(self, block_id: object) -> bool:
        return block_id in self.probation or block_id in self.protected
