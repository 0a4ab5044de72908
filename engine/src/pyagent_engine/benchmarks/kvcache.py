"""``pyagent bench kvcache``: every installed eviction policy and Belady's MIN on a block trace.

For each capacity the trace is replayed through the engine's own prefix index
(:class:`~pyagent_engine.kvcache.replay.TraceCache` over
:class:`~pyagent_engine.prefix_index.PrefixIndex`, the leaves-first pool the engine runs) with each
policy, and with MIN as one more policy over the same index. Reported per policy: hit ratio, the
share of the LRU-to-MIN gap it closes (LRU is the peer: 0 % is LRU, 100 % is MIN), and nanoseconds
per policy call, timed by replaying the calls the policy received alone (ratio to LRU's).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from pyagent_core.errors import PyagentError
from pyagent_core.interfaces.eviction import EvictionContext, EvictionPolicy
from pyagent_core.kinds import EVICTION
from pyagent_core.options import validate_options
from pyagent_core.registry import Registry, get_registry
from pyagent_engine.benchmarks.shared_data import SHARED_DATA
from pyagent_engine.kvcache.simulator import MIN, PolicyFactory, gap_closed, record_and_time, replay_min
from pyagent_engine.kvcache.trace import load_trace

PEER = "lru"
DEFAULT_TRACE = SHARED_DATA / "mooncake" / "conversation_trace.jsonl"
"""The Mooncake conversation trace in the shared data folder beside the repository."""


class KvcacheBenchError(PyagentError, ValueError):
    """The kvcache benchmark cannot run: no peer policy installed, or a bad capacity."""


def policy_factories(registry: Registry | None = None,
                     names: Sequence[str] | None = None) -> dict[str, PolicyFactory]:
    """A factory per available eviction policy (default options), by name; ``names`` narrows them."""
    registry = registry or get_registry()
    factories: dict[str, PolicyFactory] = {}
    for backend in registry.available(EVICTION):
        if names and backend.name not in names:
            continue
        impl = registry.load(backend)
        options = validate_options(backend.spec.options, {}, backend.name)
        factories[backend.name] = _factory(impl, options)
    return factories


def _factory(impl: Callable[[dict[str, Any], EvictionContext], EvictionPolicy],
             options: dict[str, Any]) -> PolicyFactory:
    return lambda context: impl(options, context)


def run_kvcache_benchmark(trace_path: Path, capacities: Sequence[int], limit: int | None = None,
                          factories: dict[str, PolicyFactory] | None = None,
                          progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Replay the trace at each capacity through every policy and MIN; return the report."""
    if not capacities or min(capacities) <= 0:
        raise KvcacheBenchError(f"capacities must be positive numbers of blocks, got {list(capacities)}")
    factories = factories if factories is not None else policy_factories()
    if PEER not in factories:
        raise KvcacheBenchError(f"the peer policy {PEER!r} is not installed (found: {sorted(factories) or 'none'}); "
                                "pip install pyagent-kvcache-policies")
    trace = load_trace(trace_path, limit=limit)
    rows: list[dict[str, Any]] = []
    for capacity in capacities:
        optimum = replay_min(trace, capacity)
        results = {}
        for name, factory in sorted(factories.items()):
            if progress:
                progress(f"capacity {capacity}: {name}")
            results[name] = record_and_time(trace, factory, capacity, name)
        peer, peer_ns = results[PEER]
        for name, (result, ns) in results.items():
            share = gap_closed(result, peer, optimum)
            rows.append({"capacity": capacity, "policy": name, "hit_ratio": result.hit_ratio,
                         "gap_closed": share, "ns_per_op": ns, "ns_ratio_to_lru": ns / peer_ns,
                         "evictions": result.evictions})
        rows.append({"capacity": capacity, "policy": MIN, "hit_ratio": optimum.hit_ratio, "gap_closed": 1.0,
                     "ns_per_op": None, "ns_ratio_to_lru": None, "evictions": optimum.evictions})
    return {"benchmark": "kvcache", "trace": str(trace_path), "requests": len(trace.requests),
            "blocks_requested": trace.total_blocks, "unique_blocks": trace.unique_blocks,
            "unbounded_hit_ratio": 1 - trace.unique_blocks / trace.total_blocks,
            "capacities": list(capacities), "peer": PEER, "results": rows}
