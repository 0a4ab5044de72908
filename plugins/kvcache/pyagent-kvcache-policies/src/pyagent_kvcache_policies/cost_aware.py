"""Cost-aware eviction: GreedyDual over recompute cost, in CAMP's O(1) form.

Recomputing a block costs its tokens times the attention span over its prefix:
``cost = tokens * (1 + depth / depth_scale)``. GreedyDual gives each block the priority
``H = L + cost`` when it is inserted or used, evicts the lowest ``H`` and raises the inflation ``L``
to it, so cheap blocks go first and expensive ones age out too. Like CAMP (Ghandeharizadeh et al.),
costs are rounded to ``precision`` significant bits, and blocks of one rounded cost share an LRU
queue in which ``H`` only grows; the lowest ``H`` is then at the head of one of the few queues.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

from pyagent_core.interfaces.eviction import BlockInfo, EvictionContext, EvictionPolicy
from pyagent_kvcache_policies.recall import Recall


def round_to_bits(value: int, bits: int) -> int:
    """``value`` (>= 1) with all but its ``bits`` most significant bits cleared."""
    drop = max(0, value.bit_length() - bits)
    return (value >> drop) << drop


class CostAwarePolicy(EvictionPolicy):
    """Evicts the block with the lowest GreedyDual priority ``H = L + rounded recompute cost``.

    Blocks inserted without a :class:`BlockInfo` cost one full block (the context's ``block_size``
    tokens) at depth 0.
    """

    def __init__(self, options: Mapping[str, Any], context: EvictionContext) -> None:
        super().__init__(options, context)
        self.depth_scale: float = self.options["depth_scale"]
        self.precision: int = self.options["precision"]
        self.full_tokens = self.context.block_size
        self.inflation = 0
        self.queues: dict[int, OrderedDict[int, int]] = {}
        """Rounded cost -> its blocks (least recently used first) -> priority H."""
        self.cost: dict[int, int] = {}
        self.recall: Recall[int] = Recall(self.capacity)

    def block_cost(self, info: BlockInfo | None) -> int:
        """Rounded recompute cost of a block described by ``info``."""
        tokens, depth = (self.full_tokens, 0) if info is None else (info.tokens, info.depth)
        return round_to_bits(max(1, round(tokens * (1 + depth / self.depth_scale))), self.precision)

    def _place(self, block_id: int, cost: int) -> None:
        self.cost[block_id] = cost
        self.queues.setdefault(cost, OrderedDict())[block_id] = self.inflation + cost

    def _unplace(self, block_id: int) -> int:
        cost = self.cost.pop(block_id)
        queue = self.queues[cost]
        del queue[block_id]
        if not queue:
            del self.queues[cost]
        return cost

    def insert(self, block_id: int) -> None:
        """Insert ``block_id`` as a full block at depth 0 (or with the cost it had when taken)."""
        self.insert_with_info(block_id, None)

    def insert_with_info(self, block_id: int, info: BlockInfo | None) -> None:
        """Insert ``block_id`` at priority ``L + cost`` (its cost from ``info``, or from before it was taken)."""
        self.check_insert(block_id)
        known = self.recall.pop(block_id, None)
        self._place(block_id, known if info is None and known is not None else self.block_cost(info))

    def touch(self, block_id: int) -> None:
        """Refresh ``block_id`` to priority ``L + cost``."""
        self.check_present(block_id)
        self._place(block_id, self._unplace(block_id))

    def remove(self, block_id: int) -> None:
        """Stop tracking ``block_id``, remembering its cost."""
        self.check_present(block_id)
        self.recall.keep(block_id, self._unplace(block_id))

    def forget(self, block_id: int) -> None:
        """Drop the remembered cost of ``block_id``."""
        super().forget(block_id)
        self.recall.pop(block_id, None)

    def evict(self) -> int:
        """Evict the lowest-priority block (a queue head) and raise the inflation to its priority."""
        self.check_not_empty()
        best_queue = min(self.queues.values(), key=lambda queue: next(iter(queue.values())))
        block_id, priority = next(iter(best_queue.items()))
        self.inflation = priority
        self._unplace(block_id)
        return block_id

    def __len__(self) -> int:
        return len(self.cost)

    def __contains__(self, block_id: object) -> bool:
        return block_id in self.cost
