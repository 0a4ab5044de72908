"""KV-cache flags of ``pyagent generate``: prefix caching, its eviction policy, hash and offload tier.

Per-request isolation (``cache_salt``) and opting out (``skip_prefix_cache``) are request parameters
of the Python API (:class:`~pyagent_engine.requests.params.SamplingParams`).
"""

from __future__ import annotations

from typing import Annotated, Any

import typer

from pyagent_core.options import parse_assignments

PANEL = "KV cache"

PrefixCachingOpt = Annotated[bool, typer.Option(
    "--prefix-caching/--no-prefix-caching", rich_help_panel=PANEL,
    help="Share computed KV blocks between requests with the same prefix (skips their prefill).")]
EvictionOpt = Annotated[str | None, typer.Option(
    "--eviction", rich_help_panel=PANEL,
    help="Eviction policy of the prefix cache and offload tier (default: selection; see `pyagent list eviction`).")]
EvictionOptsOpt = Annotated[list[str] | None, typer.Option(
    "--eviction-opt", rich_help_panel=PANEL, help="Eviction policy option KEY=VALUE (repeatable).")]
KvHashOpt = Annotated[str, typer.Option(
    "--kv-hash", rich_help_panel=PANEL, help="Block hash: sha256, xxhash (needs the xxhash package) or builtin.")]
OffloadOpt = Annotated[int, typer.Option(
    "--offload-blocks", min=0, rich_help_panel=PANEL,
    help="Blocks of host memory that evicted KV blocks go down to and come back up from (0: no tier).")]


def cache_config(prefix_caching: bool, eviction: str | None, eviction_opt: list[str] | None, kv_hash: str,
                 offload_blocks: int) -> dict[str, Any]:
    """The :class:`~pyagent_engine.core.config.EngineConfig` fields the KV-cache flags set."""
    return {"prefix_caching": prefix_caching, "eviction": eviction,
            "eviction_options": parse_assignments(eviction_opt or []), "kv_hash": kv_hash,
            "offload_blocks": offload_blocks}
