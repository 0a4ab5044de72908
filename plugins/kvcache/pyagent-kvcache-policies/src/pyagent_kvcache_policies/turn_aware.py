"""Turn-aware eviction: what a prefix KV cache knows about conversations, on S3-FIFO's queues.

A conversation's next turn reuses its whole history, but usually only after many other requests:
on the Mooncake conversation trace a block's next use is hundreds of requests away, far beyond what
an LRU cache of a few thousand blocks keeps. So:

- A sequence's partial last block (``BlockInfo.full`` false) can never prefix a longer prompt: it
  is evicted before anything else.
- New blocks enter a small FIFO; the ids it evicts are remembered in a long ghost history
  (``ghost_factor * capacity`` ids, enough to span several turns). A block that comes back while
  remembered (the next turn of its conversation), or that a request took and gives back, enters the
  main FIFO, where it stays while it keeps being used (S3-FIFO's lazy promotion, up to 3 uses).
- The small queue's share adapts, like ARC's target: a ghost hit on an id evicted from the small
  queue within the last ``window * capacity`` small-queue evictions grows it by
  ``step * capacity`` blocks; one on an id recently evicted from main shrinks it. Small caches
  settle on a tiny small queue (keep a few conversations long), large ones on a big one (keep every
  recent turn).

Every operation is O(1) amortised (``OrderedDict`` queues; each lazy promotion spends a use).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

from pyagent_core.interfaces.eviction import BlockInfo, EvictionContext, EvictionPolicy
from pyagent_kvcache_policies.recall import Recall
from pyagent_kvcache_policies.s3fifo import MAX_USES, evict_lazily


class TurnAwarePolicy(EvictionPolicy):
    """Partial tails first, then an adaptive small FIFO, then a main FIFO with lazy promotion."""

    def __init__(self, options: Mapping[str, Any], context: EvictionContext) -> None:
        super().__init__(options, context)
        self.small_target = self.options["small_fraction"] * self.capacity
        self.min_small = self.options["min_small_fraction"] * self.capacity
        self.max_small = self.options["max_small_fraction"] * self.capacity
        self.step = max(1.0, self.options["step"] * self.capacity)
        self.window = self.options["window"] * self.capacity
        self.ghost_size = round(self.options["ghost_factor"] * self.capacity)
        self.history = self.ghost_size
        self.tails: OrderedDict[int, None] = OrderedDict()
        self.small: OrderedDict[int, None] = OrderedDict()
        self.main: OrderedDict[int, None] = OrderedDict()
        self.uses: dict[int, int] = {}
        self.ghost: OrderedDict[int, tuple[bool, int]] = OrderedDict()
        """Evicted id -> (evicted from the small queue, that queue's eviction count then)."""
        self.evicted_small = 0
        self.evicted_main = 0
        self.recall: Recall[int] = Recall(self.capacity)

    def insert(self, block_id: int) -> None:
        """Insert ``block_id`` with nothing known of its place (a full block)."""
        self.insert_with_info(block_id, None)

    def insert_with_info(self, block_id: int, info: BlockInfo | None) -> None:
        """Queue ``block_id``: tails if partial, main if reused or remembered, else small."""
        uses = self.uses
        if block_id in uses or len(uses) >= self.capacity:
            self.check_insert(block_id)
        kept = self.recall.pop(block_id, None)
        if kept is not None:
            uses[block_id] = kept + 1 if kept < MAX_USES else MAX_USES
            self.main[block_id] = None
            return
        uses[block_id] = 0
        remembered = self.ghost.pop(block_id, None)
        if info is not None and not info.full:
            self.tails[block_id] = None
        elif remembered is None:
            self.small[block_id] = None
        else:  # a ghost hit: a recent one grows the queue it was evicted from
            from_small, evicted_at = remembered
            if from_small and self.evicted_small - evicted_at <= self.window:
                self.small_target = min(self.max_small, self.small_target + self.step)
            elif not from_small and self.evicted_main - evicted_at <= self.window:
                self.small_target = max(self.min_small, self.small_target - self.step)
            self.main[block_id] = None

    def touch(self, block_id: int) -> None:
        """Count a use of ``block_id`` (no reordering)."""
        self.check_present(block_id)
        self.uses[block_id] = min(self.uses[block_id] + 1, MAX_USES)

    def remove(self, block_id: int) -> None:
        """Stop tracking ``block_id``; when a request gives it back it enters main."""
        uses = self.uses
        if block_id not in uses:
            self.check_present(block_id)
        if self.small.pop(block_id, True) is not None and self.main.pop(block_id, True) is not None:
            del self.tails[block_id]
        self.recall.keep(block_id, uses.pop(block_id))

    def discard(self, block_id: int) -> None:
        """Evict ``block_id``, which must be present, chosen by someone else (no check made).

        It leaves its queue and is remembered in the ghost history like a victim of that queue (a
        partial tail is not remembered), as :meth:`evict` would have done.
        """
        del self.uses[block_id]
        if self.small.pop(block_id, True) is None:
            self._remember(block_id, True)
        elif self.main.pop(block_id, True) is None:
            self._remember(block_id, False)
        else:
            del self.tails[block_id]

    def forget(self, block_id: int) -> None:
        """Drop ``block_id`` from the ghost history and from the memory of taken blocks."""
        if block_id in self.uses:
            super().forget(block_id)
        self.ghost.pop(block_id, None)
        self.recall.pop(block_id, None)

    def _remember(self, block_id: int, from_small: bool) -> None:
        """Count ``block_id``'s eviction from its queue and keep it in the ghost history."""
        if from_small:
            self.evicted_small = count = self.evicted_small + 1
        else:
            self.evicted_main = count = self.evicted_main + 1
        ghost = self.ghost
        ghost[block_id] = (from_small, count)
        if len(ghost) > self.ghost_size:
            ghost.popitem(last=False)

    def evict(self) -> int:
        """Evict a partial tail, else small's head (unless used: to main), else main's unused head."""
        if not self.uses:
            self.check_not_empty()
        return self.pick()

    def pick(self) -> int:
        """What :meth:`evict` does once it has checked that there is a block to evict."""
        tails, uses = self.tails, self.uses
        if tails:
            block_id = tails.popitem(last=False)[0]
            del uses[block_id]
            return block_id
        block_id, from_small = evict_lazily(self.small, self.main, uses, self.small_target)
        self._remember(block_id, from_small)
        return block_id

    def __len__(self) -> int:
        return len(self.uses)

    def __contains__(self, block_id: object) -> bool:
        return block_id in self.uses
