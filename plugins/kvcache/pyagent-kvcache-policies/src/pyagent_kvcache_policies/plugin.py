"""Registers the eviction policies. Imported while listing plugins: no implementation is imported here."""

from __future__ import annotations

from collections.abc import Callable

from pyagent_core import EvictionSpec, OptionSpec, hookimpl
from pyagent_core.install import checkout_install_hint

PACKAGE = "pyagent_kvcache_policies"
INSTALL_HINT = checkout_install_hint("pyagent-kvcache-policies", "plugins/kvcache/pyagent-kvcache-policies")


def _spec(name: str, impl: str, summary: str, description: str = "", priority: int = 0,
          options: dict[str, OptionSpec] | None = None) -> EvictionSpec:
    return EvictionSpec(name=name, impl=f"{PACKAGE}.{impl}", summary=summary, description=description,
                        priority=priority, options=options or {}, install_hint=INSTALL_HINT)


TURN_AWARE_OPTIONS: dict[str, OptionSpec] = {
    "small_fraction": OptionSpec(type=float, default=0.1, min=0.0, max=1.0,
                                 help="initial share of the capacity for new blocks"),
    "min_small_fraction": OptionSpec(type=float, default=0.002, min=0.0, max=1.0,
                                     help="lowest share the small queue adapts to"),
    "max_small_fraction": OptionSpec(type=float, default=0.9, min=0.0, max=1.0,
                                     help="highest share the small queue adapts to"),
    "step": OptionSpec(type=float, default=0.001, min=0.0, max=1.0,
                       help="adaptation step, as a share of the capacity (at least 1 block)"),
    "window": OptionSpec(type=float, default=0.05, min=0.0,
                         help="ghost hits count for adaptation within window * capacity evictions"),
    "ghost_factor": OptionSpec(type=float, default=8.0, min=0.0,
                               help="evicted ids remembered, as a multiple of the capacity"),
}
"""Options of ``turn-aware``, which ``adaptive`` takes for its turn-aware expert too."""

SPECS = (
    _spec("lru", "lru:LruPolicy", "Least recently used: evicts the block used longest ago.",
          "An OrderedDict from least to most recently used; a block given back by a request becomes "
          "the most recently used. The default policy, as in vLLM's block pool.", priority=10),
    _spec("fifo", "fifo:FifoPolicy", "First in, first out: evicts the block cached longest ago.",
          "Uses do not reorder blocks; a block a request takes keeps its place in the queue."),
    _spec("lfu", "lfu:LfuPolicy", "Least frequently used (ties: least recently used).",
          "Frequency buckets with a bitmask of the non-empty ones; a block a request takes keeps its "
          "count and comes back one use higher.",
          options={"max_frequency": OptionSpec(type=int, default=255, min=1, max=4096,
                                                help="counts saturate here")}),
    _spec("arc", "arc:ArcPolicy", "Adaptive Replacement Cache: recency and frequency lists, ghosts, target p.",
          "T1 (used once), T2 (used again), ghost lists B1/B2 of evicted ids; ghost hits adapt T1's "
          "target size p."),
    _spec("slru", "slru:SlruPolicy", "Segmented LRU: probation for new blocks, protection for reused ones.",
          options={"protected_fraction": OptionSpec(type=float, default=0.8, min=0.0, max=1.0,
                                                    help="share of the capacity the protected segment holds")}),
    _spec("s3-fifo", "s3fifo:S3FifoPolicy", "S3-FIFO: small, main and ghost FIFO queues with lazy promotion.",
          options={"small_fraction": OptionSpec(type=float, default=0.1, min=0.0, max=1.0,
                                                help="share of the capacity the small queue holds")}),
    _spec("cost-aware", "cost_aware:CostAwarePolicy",
          "GreedyDual over recompute cost (tokens x prefix depth), CAMP-style O(1) queues.",
          "cost = tokens * (1 + depth / depth_scale), rounded to `precision` significant bits; evicts the "
          "lowest L + cost and raises L to it. Uses the pool's BlockInfo.",
          options={
              "depth_scale": OptionSpec(type=float, default=16.0, min=1e-3,
                                        help="depth (in blocks) at which attention doubles a block's cost"),
              "precision": OptionSpec(type=int, default=3, min=1, max=16,
                                      help="significant bits kept of each cost"),
          }),
    _spec("turn-aware", "turn_aware:TurnAwarePolicy",
          "Conversation-aware: partial tails first, adaptive small FIFO, long ghost history, main FIFO.",
          "Evicts partial last blocks first; new blocks pass a small FIFO whose evicted ids are "
          "remembered long enough to recognise a conversation's next turn, which then enters the main "
          "FIFO; the small queue's share adapts to ghost hits. Uses the pool's BlockInfo.",
          options=TURN_AWARE_OPTIONS),
    _spec("adaptive", "adaptive:AdaptivePolicy",
          "Follows whichever of LRU and turn-aware hits more: both order the blocks, sampled shadows decide.",
          "LRU and turn-aware track the same blocks; shadow caches of each, fed a hashed sample of the "
          "ids, count the hits one makes and the other misses, and the expert ahead picks the victims. "
          "Takes turn-aware's options for its turn-aware expert. Uses the pool's BlockInfo.",
          options={
              **TURN_AWARE_OPTIONS,
              "sample": OptionSpec(type=float, default=1 / 32, min=1e-4, max=1.0,
                                   help="share of the ids the shadow caches see (raised to hold 128 blocks)"),
              "tails_first": OptionSpec(type=bool, default=True,
                                        help="LRU's turn evicts partial last blocks first too"),
              "patience": OptionSpec(type=float, default=1.0, min=1e-3,
                                     help="score limit, as a multiple of the shadow capacity: how long a "
                                          "lead lasts after the traffic changes"),
          }),
)


@hookimpl
def pyagent_register_eviction_policies(register: Callable[[EvictionSpec], None]) -> None:
    """Register every policy of this distribution."""
    for spec in SPECS:
        register(spec)
