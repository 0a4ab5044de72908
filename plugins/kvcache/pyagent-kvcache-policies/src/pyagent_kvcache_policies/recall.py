"""Bounded memory of the blocks a request took from a policy, so a policy sees their reuse.

A pool removes a block from its policy when a request starts using it and inserts it again when
the request gives it back: that is a cache hit. Policies that rank by history (frequency, segment)
keep what they knew of a taken block here and find it again on the next insert. The memory holds at
most ``capacity`` ids (the pool's size bounds the blocks in use), dropping the oldest beyond that.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import TypeVar

State = TypeVar("State")


class Recall(OrderedDict[int, State]):
    """Up to ``capacity`` taken ids with the state the policy kept for each, oldest first.

    ``recall.pop(block_id, None)`` is what was kept for ``block_id`` (now forgotten), or ``None``: a
    first insert. It is the dictionary's own ``pop``, so looking up costs no Python call.
    """

    def __init__(self, capacity: int) -> None:
        super().__init__()
        self.capacity = capacity

    def keep(self, block_id: int, state: State) -> None:
        """Remember ``state`` for the taken ``block_id``, forgetting the oldest id beyond capacity."""
        self[block_id] = state
        if len(self) > self.capacity:
            self.popitem(last=False)
