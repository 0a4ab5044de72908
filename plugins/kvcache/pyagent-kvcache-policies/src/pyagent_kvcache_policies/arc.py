"""Adaptive Replacement Cache (Megiddo and Modha): T1/T2 resident lists, B1/B2 ghosts, target p.

Every operation is O(1): four ``OrderedDict`` s from least to most recently used.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

from pyagent_core.interfaces.eviction import EvictionContext, EvictionPolicy
from pyagent_kvcache_policies.recall import Recall


class ArcPolicy(EvictionPolicy):
    """ARC over evictable blocks, with ``c = capacity``.

    T1 holds blocks used once, T2 blocks used again (touched, or given back after a request took
    them); B1 and B2 remember the ids evicted from each. A first insert that hits a ghost adapts the
    target size ``p`` of T1 (up on a B1 hit, down on a B2 hit) and enters T2. ``evict`` takes T1's
    least recently used block while ``|T1| > p`` (or T2 is empty), else T2's, and keeps it as a
    ghost. Ghosts are trimmed so that ``|T1| + |B1| <= c`` and ``|T1| + |T2| + |B1| + |B2| <= 2c``.
    Unlike the paper's REPLACE, ``evict`` does not know which block is about to come in, so the
    tie ``|T1| == p`` goes to T2.
    """

    def __init__(self, options: Mapping[str, Any], context: EvictionContext) -> None:
        super().__init__(options, context)
        self.t1: OrderedDict[int, None] = OrderedDict()
        self.t2: OrderedDict[int, None] = OrderedDict()
        self.b1: OrderedDict[int, None] = OrderedDict()
        self.b2: OrderedDict[int, None] = OrderedDict()
        self.p = 0.0
        self.recall: Recall[bool] = Recall(self.capacity)
        self.history = 2 * self.capacity  # |B1| + |B2| <= 2c

    def insert(self, block_id: int) -> None:
        """Enter T1 (new), or T2 (given back after a request took it, or a ghost hit)."""
        self.check_insert(block_id)
        c = self.capacity
        if self.recall.pop(block_id, None) is not None:
            pass
        elif block_id in self.b1:
            self.p = min(float(c), self.p + max(len(self.b2) / len(self.b1), 1.0))
            del self.b1[block_id]
        elif block_id in self.b2:
            self.p = max(0.0, self.p - max(len(self.b1) / len(self.b2), 1.0))
            del self.b2[block_id]
        else:
            if len(self.t1) + len(self.b1) >= c:
                self.b1.popitem(last=False)
            elif len(self.t1) + len(self.t2) + len(self.b1) + len(self.b2) >= 2 * c:
                self.b2.popitem(last=False)
            self.t1[block_id] = None
            return
        self.t2[block_id] = None

    def touch(self, block_id: int) -> None:
        """Make ``block_id`` the most recently used block of T2."""
        self.check_present(block_id)
        if block_id in self.t1:
            del self.t1[block_id]
        self.t2[block_id] = None
        self.t2.move_to_end(block_id)

    def remove(self, block_id: int) -> None:
        """Stop tracking ``block_id``; when it comes back it enters T2."""
        self.check_present(block_id)
        if self.t1.pop(block_id, True) is not None:
            del self.t2[block_id]
        self.recall.keep(block_id, True)

    def forget(self, block_id: int) -> None:
        """Drop ``block_id`` from the ghost lists and from the memory of taken blocks."""
        super().forget(block_id)
        self.b1.pop(block_id, None)
        self.b2.pop(block_id, None)
        self.recall.pop(block_id, None)

    def evict(self) -> int:
        """Move T1's (or T2's) least recently used block to its ghost list and return it."""
        self.check_not_empty()
        if self.t1 and (len(self.t1) > self.p or not self.t2):
            block_id = self.t1.popitem(last=False)[0]
            self.b1[block_id] = None
        else:
            block_id = self.t2.popitem(last=False)[0]
            self.b2[block_id] = None
        return block_id

    def __len__(self) -> int:
        return len(self.t1) + len(self.t2)

    def __contains__(self, block_id: object) -> bool:
        return block_id in self.t1 or block_id in self.t2
