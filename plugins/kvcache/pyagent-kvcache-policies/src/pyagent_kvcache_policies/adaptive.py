"""Adaptive eviction: LRU and turn-aware order the same blocks, and the one doing better picks victims.

``turn-aware`` wins on conversation traces and loses to LRU on others; neither is safe as a default.
This policy is a :class:`~pyagent_kvcache_policies.turn_aware.TurnAwarePolicy` whose table of
present blocks (their uses) is an ``OrderedDict`` kept in LRU order: moved to the end on a touch,
entered at the end on an insert, which is all LRU needs. So both experts order the same blocks at
the cost of one, and the policy asks one of them, the *leader*, for each victim; the other drops
the victim too (turn-aware remembers LRU's victims in its ghost history, as if it had evicted them
itself, so it still recognises a conversation's next turn).

Which expert leads is decided by what each would have hit on its own: two shadow caches, an LRU and
a turn-aware of ``rate * capacity`` blocks, see the accesses (inserts and touches) of a sample of
the ids (``rate`` of them, chosen by a multiplicative hash of the id, as in SHARDS), and keep their
own contents. A shadow hit of one expert that the other missed moves a score towards it; the score
saturates at ``patience`` times the shadow capacity either way, so after a change of traffic the
leader changes within about that many sampled accesses. The leader is turn-aware while the score is
positive, LRU otherwise (LRU to begin with). With ``tails_first`` (the default), LRU's turn too
evicts a sequence's partial last block first, when there is one: it cannot prefix a longer prompt
(turn-aware's first rule), and only an exact repeat of the prompt would use it again.

So the policy follows the expert that hits more on the recent traffic, and loses to it only while
the score is catching up; the sampled shadows cost a fraction ``rate`` of their experts' work.
``rate`` is ``sample``, raised so that the shadows hold at least ``MIN_SHADOW`` blocks (all ids for
small caches). Every operation is O(1) amortised.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

from pyagent_core.interfaces.eviction import BlockInfo, EvictionContext
from pyagent_kvcache_policies.plugin import TURN_AWARE_OPTIONS
from pyagent_kvcache_policies.turn_aware import TurnAwarePolicy

MIN_SHADOW = 128
"""Fewest blocks a shadow cache holds; ``rate`` is raised to reach it."""

HASH_MULTIPLIER = 0x9E3779B1
"""Knuth's multiplicative hash (2^32 / golden ratio): which ids the shadows sample."""


class ShadowCaches:
    """An LRU and a turn-aware cache of ``capacity`` blocks fed the same accesses; counts who hit."""

    def __init__(self, turn_options: Mapping[str, Any], context: EvictionContext) -> None:
        self.capacity = context.capacity
        self.recency: OrderedDict[int, None] = OrderedDict()
        self.turns = TurnAwarePolicy(turn_options, context)

    def access(self, block_id: int, info: BlockInfo | None) -> int:
        """Serve an access to ``block_id`` in both caches; +1 if only turn-aware hit, -1 if only
        LRU hit, else 0."""
        recency, turns = self.recency, self.turns
        if block_id in recency:
            recency.move_to_end(block_id)
            lru_hit = True
        else:
            recency[block_id] = None
            if len(recency) > self.capacity:
                recency.popitem(last=False)
            lru_hit = False
        turns_hit = block_id in turns.uses
        if turns_hit:
            turns.remove(block_id)
        elif len(turns.uses) >= self.capacity:
            turns.pick()
        turns.insert_with_info(block_id, info)
        return int(turns_hit) - int(lru_hit)

    def forget(self, block_id: int) -> None:
        """Drop every trace of ``block_id``: the id names other content from now on."""
        self.recency.pop(block_id, None)
        turns = self.turns
        if block_id in turns.uses:
            turns.discard(block_id)
        turns.forget(block_id)


class AdaptivePolicy(TurnAwarePolicy):
    """LRU and turn-aware over the same blocks; sampled shadow caches pick which one evicts."""

    def __init__(self, options: Mapping[str, Any], context: EvictionContext) -> None:
        super().__init__(options, context)
        self.uses: OrderedDict[int, int] = OrderedDict()
        """Turn-aware's uses of every present id, least recently used first: the LRU expert."""
        turn_options = {name: self.options[name] for name in TURN_AWARE_OPTIONS}
        rate = min(1.0, max(self.options["sample"], MIN_SHADOW / self.capacity))
        self.threshold = round(rate * 2**32)
        """An id is sampled when its hash, in ``[0, 2^32)``, is below this."""
        shadow = EvictionContext(max(1, round(rate * self.capacity)), context.block_size)
        self.shadows = ShadowCaches(turn_options, shadow)
        self.limit = max(1, round(self.options["patience"] * shadow.capacity))
        self.tails_first: bool = self.options["tails_first"]
        """Whether LRU's turn also takes partial last blocks first, as turn-aware does."""
        self.score = 0
        """Sampled accesses turn-aware hit and LRU missed, minus the converse, within +-``limit``."""

    def _observe(self, block_id: int, info: BlockInfo | None) -> None:
        score = self.score + self.shadows.access(block_id, info)
        self.score = max(-self.limit, min(self.limit, score))

    @property
    def leader(self) -> str:
        """The expert that picks the next victim: ``"turn-aware"`` or ``"lru"``."""
        return "turn-aware" if self.score > 0 else "lru"

    def insert_with_info(self, block_id: int, info: BlockInfo | None) -> None:
        """Track ``block_id`` in both experts (most recent for LRU) and show it to the shadows."""
        turn_aware_insert(self, block_id, info)
        if (block_id * HASH_MULTIPLIER) & 0xFFFFFFFF < self.threshold:
            self._observe(block_id, info)

    def touch(self, block_id: int) -> None:
        """Record an access to ``block_id`` in both experts and the shadows."""
        super().touch(block_id)
        self.uses.move_to_end(block_id)
        if (block_id * HASH_MULTIPLIER) & 0xFFFFFFFF < self.threshold:
            self._observe(block_id, None)

    def forget(self, block_id: int) -> None:
        """Drop the history both experts and the shadows keep of ``block_id``."""
        turn_aware_forget(self, block_id)
        if (block_id * HASH_MULTIPLIER) & 0xFFFFFFFF < self.threshold:
            self.shadows.forget(block_id)

    def evict(self) -> int:
        """The leader's victim, dropped by the other expert too."""
        uses = self.uses
        if not uses:
            self.check_not_empty()
        if self.score > 0 or (self.tails_first and self.tails):
            return self.pick()
        block_id = next(iter(uses))
        self.discard(block_id)
        return block_id


turn_aware_insert = TurnAwarePolicy.insert_with_info
turn_aware_forget = TurnAwarePolicy.forget
"""Turn-aware's methods that :class:`AdaptivePolicy` extends, bound here so that a call costs no
``super()`` lookup (these run on every insert and every recycled id)."""
