"""S3-FIFO (Yang et al., SOSP 2023): a small FIFO, a main FIFO and a ghost FIFO (O(1) amortised)."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

from pyagent_core.interfaces.eviction import EvictionContext, EvictionPolicy
from pyagent_kvcache_policies.recall import Recall

MAX_USES = 3
"""Uses counted per block (two bits, as in the paper)."""



def evict_lazily(small: OrderedDict[int, None], main: OrderedDict[int, None], uses: dict[int, int],
                 small_limit: float) -> tuple[int, bool]:
    """S3-FIFO's eviction walk over the two queues; returns ``(victim, whether it left small)``.

    While small holds at least ``small_limit`` blocks (or main is empty) its head is taken: a block
    used since it came in moves to main with its uses cleared, an unused one is the victim.
    Otherwise main's head is taken: a used block goes back to main's tail with one use less (lazy
    promotion), an unused one is the victim. The victim's entry in ``uses`` is deleted.
    """
    while True:
        from_small = bool(small) and (len(small) >= small_limit or not main)
        queue = small if from_small else main
        block_id = queue.popitem(last=False)[0]
        if uses[block_id]:
            uses[block_id] = 0 if from_small else uses[block_id] - 1
            main[block_id] = None
            continue
        del uses[block_id]
        return block_id, from_small


class S3FifoPolicy(EvictionPolicy):
    """New blocks enter the small queue; ghost hits and blocks used again enter the main queue.

    ``evict`` drains the small queue while it holds at least ``small_fraction * capacity`` blocks
    (or main is empty): its head moves to main if it was used since it came in, else it is evicted
    and remembered in the ghost queue (``capacity`` ids at most). Otherwise main's head is evicted
    if unused, or goes back to main's tail with one use less (lazy promotion). A block a request
    took comes back at main's tail with one more use.
    """

    def __init__(self, options: Mapping[str, Any], context: EvictionContext) -> None:
        super().__init__(options, context)
        self.small_size = max(1, round(self.options["small_fraction"] * self.capacity))
        self.small: OrderedDict[int, None] = OrderedDict()
        self.main: OrderedDict[int, None] = OrderedDict()
        self.ghost: OrderedDict[int, None] = OrderedDict()
        self.uses: dict[int, int] = {}
        self.recall: Recall[int] = Recall(self.capacity)
        self.history = self.capacity  # the ghost queue's length

    def insert(self, block_id: int) -> None:
        """Queue ``block_id``: small if new, main if a ghost or given back by a request."""
        self.check_insert(block_id)
        uses = self.recall.pop(block_id, None)
        if uses is not None:
            self.uses[block_id] = min(uses + 1, MAX_USES)
            self.main[block_id] = None
            return
        self.uses[block_id] = 0
        if self.ghost.pop(block_id, True) is None:
            self.main[block_id] = None
        else:
            self.small[block_id] = None

    def touch(self, block_id: int) -> None:
        """Count a use of ``block_id`` (no reordering)."""
        self.check_present(block_id)
        self.uses[block_id] = min(self.uses[block_id] + 1, MAX_USES)

    def remove(self, block_id: int) -> None:
        """Stop tracking ``block_id``, remembering its uses for when it comes back."""
        self.check_present(block_id)
        if self.small.pop(block_id, True) is not None:
            del self.main[block_id]
        self.recall.keep(block_id, self.uses.pop(block_id))

    def forget(self, block_id: int) -> None:
        """Drop ``block_id`` from the ghost queue and from the memory of taken blocks."""
        super().forget(block_id)
        self.ghost.pop(block_id, None)
        self.recall.pop(block_id, None)

    def evict(self) -> int:
        """Evict from small (unused blocks) or main (unused after lazy promotion) and return it."""
        self.check_not_empty()
        block_id, from_small = evict_lazily(self.small, self.main, self.uses, self.small_size)
        if from_small:
            self.ghost[block_id] = None
            if len(self.ghost) > self.capacity:
                self.ghost.popitem(last=False)
        return block_id

    def __len__(self) -> int:
        return len(self.uses)

    def __contains__(self, block_id: object) -> bool:
        return block_id in self.uses
