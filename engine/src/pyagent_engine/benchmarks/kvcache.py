"""``pyagent bench kvcache``: every installed eviction policy and Belady's MIN on block traces.

For each trace and capacity the trace is replayed through the engine's own prefix index
(:class:`~pyagent_engine.kvsim.replay.TraceCache` over
:class:`~pyagent_engine.kv.prefix_index.PrefixIndex`, the leaves-first pool the engine runs) with each
policy, and with MIN as one more policy over the same index. Reported per trace, capacity and
policy: hit ratio, the share of the LRU-to-MIN gap it closes (LRU is the peer: 0 % is LRU, 100 % is
MIN), and nanoseconds per policy call, timed by replaying the calls the policy received alone,
the policies taking turns over three rounds and each keeping its fastest (ratio to LRU's). Policies
receive different calls for the same trace (the index calls ``forget`` on every recycled id, which
for a policy without history is every victim; one that evicts less is called less), so the cost of
serving the trace is also given per requested block: all the policy's call time over the blocks
requested, the same count for every policy (ratio to LRU's). Per policy over every trace and
capacity: the mean gap closed, the worst hit ratio against LRU's and the highest cost ratios.

Traces are Mooncake-format files or workloads of :mod:`pyagent_engine.kvsim.generate`; a
capacity is a number of blocks or a percentage of the trace's unique blocks (``20%``).
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from typing import Any

from pyagent_core.errors import PyagentError
from pyagent_core.install import checkout_install_hint
from pyagent_core.interfaces.eviction import EvictionContext, EvictionPolicy
from pyagent_core.kinds import EVICTION
from pyagent_core.options import validate_options
from pyagent_core.registry import Registry, get_registry
from pyagent_engine.benchmarks.shared_data import SHARED_DATA
from pyagent_engine.kvsim.generate import WORKLOADS, generate_trace
from pyagent_engine.kvsim.simulator import MIN, PolicyFactory, gap_closed, record_and_time, replay_min
from pyagent_engine.kvsim.trace import BlockTrace

PEER = "lru"
DEFAULT_TRACE = SHARED_DATA / "mooncake" / "conversation_trace.jsonl"
"""The Mooncake conversation trace in the shared data folder beside the repository."""
DEFAULT_TRACES = (DEFAULT_TRACE, SHARED_DATA / "mooncake" / "synthetic_trace.jsonl")
"""Both Mooncake traces of the shared data folder: with every generated workload, the default suite."""
DEFAULT_CAPACITIES = ("5%", "20%", "50%")
"""Default cache sizes: shares of each trace's unique blocks."""


class KvcacheBenchError(PyagentError, ValueError):
    """The kvcache benchmark cannot run: no peer policy installed, a bad capacity or workload name."""


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


def generated_trace(name: str) -> BlockTrace:
    """The generated workload ``name`` (one of :data:`~pyagent_engine.kvsim.generate.WORKLOADS`)."""
    if name not in WORKLOADS:
        raise KvcacheBenchError(f"no generated workload {name!r}; choose one of: {', '.join(WORKLOADS)}")
    return generate_trace(WORKLOADS[name], f"generated:{name}")


def resolve_capacity(text: str | int, trace: BlockTrace) -> int:
    """Blocks meant by ``text``: a positive count, or ``P%`` of the trace's unique blocks (at least 1)."""
    value = str(text).strip()
    try:
        blocks = (max(1, round(float(value[:-1]) / 100 * trace.unique_blocks)) if value.endswith("%")
                  else int(value))
        valid = blocks > 0 and (not value.endswith("%") or 0 < float(value[:-1]) <= 100)
    except ValueError:
        valid = False
    if not valid:
        raise KvcacheBenchError(f"capacity {text!r} is neither a positive number of blocks nor a share "
                                "of the unique blocks like '20%'")
    return blocks


def run_kvcache_benchmark(traces: Sequence[BlockTrace], capacities: Sequence[str | int],
                          factories: dict[str, PolicyFactory] | None = None,
                          progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Replay each trace at each capacity through every policy and MIN; return the report."""
    if not capacities:
        raise KvcacheBenchError("no capacities given; pass block counts or shares like '5%,20%,50%'")
    sizes = [[resolve_capacity(text, trace) for text in capacities] for trace in traces]
    factories = factories if factories is not None else policy_factories()
    if PEER not in factories:
        raise KvcacheBenchError(f"the peer policy {PEER!r} is not installed (found: {sorted(factories) or 'none'}); "
                                + checkout_install_hint("pyagent-kvcache-policies",
                                                        "plugins/kvcache/pyagent-kvcache-policies"))
    rows: list[dict[str, Any]] = []
    described = []
    for trace, blocks in zip(traces, sizes, strict=True):
        described.append({"trace": trace.name, "requests": len(trace.requests), "blocks_requested": trace.total_blocks,
                          "unique_blocks": trace.unique_blocks,
                          "unbounded_hit_ratio": 1 - trace.unique_blocks / trace.total_blocks})
        for text, capacity in zip(capacities, blocks, strict=True):
            rows += _rows_at(trace, str(text), capacity, factories, progress)
    return {"benchmark": "kvcache", "traces": described, "capacities": [str(c) for c in capacities],
            "peer": PEER, "results": rows, "summary": summarise(rows)}


def _rows_at(trace: BlockTrace, label: str, capacity: int, factories: dict[str, PolicyFactory],
             progress: Callable[[str], None] | None) -> list[dict[str, Any]]:
    optimum = replay_min(trace, capacity)
    if progress:
        progress(f"{trace.name} at {capacity} blocks")
    results = record_and_time(trace, dict(sorted(factories.items())), capacity)
    peer, peer_ns, peer_calls = results[PEER]
    peer_block_ns = peer_ns * peer_calls / peer.requested
    where = {"trace": trace.name, "capacity": capacity, "share": label}
    rows = [{**where, "policy": name, "hit_ratio": result.hit_ratio, "gap_closed": gap_closed(result, peer, optimum),
             "points_vs_lru": 100 * (result.hit_ratio - peer.hit_ratio), "ns_per_op": ns,
             "ns_ratio_to_lru": ns / peer_ns, "calls": calls, "ns_per_block": ns * calls / result.requested,
             "ns_per_block_ratio_to_lru": ns * calls / result.requested / peer_block_ns,
             "evictions": result.evictions}
            for name, (result, ns, calls) in results.items()]
    rows.append({**where, "policy": MIN, "hit_ratio": optimum.hit_ratio, "gap_closed": 1.0,
                 "points_vs_lru": 100 * (optimum.hit_ratio - peer.hit_ratio), "ns_per_op": None,
                 "ns_ratio_to_lru": None, "calls": None, "ns_per_block": None, "ns_per_block_ratio_to_lru": None,
                 "evictions": optimum.evictions})
    return rows


def summarise(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per policy over every trace and capacity: mean gap closed (where there is a gap), the worst
    hit ratio against LRU's in points, and the largest cost ratios to LRU (per call, per block)."""
    summary = []
    for name in sorted({row["policy"] for row in rows} - {MIN}):
        mine = [row for row in rows if row["policy"] == name]
        gaps = [row["gap_closed"] for row in mine if row["gap_closed"] is not None]
        summary.append({"policy": name, "mean_gap_closed": statistics.fmean(gaps) if gaps else None,
                        "worst_points_vs_lru": min(row["points_vs_lru"] for row in mine),
                        "max_ns_ratio_to_lru": max(row["ns_ratio_to_lru"] for row in mine),
                        "max_ns_per_block_ratio_to_lru": max(row["ns_per_block_ratio_to_lru"] for row in mine)})
    return summary
