"""The engine's sizes and cache settings, validated on construction."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import attrs

from pyagent_core.errors import ConfigError
from pyagent_engine.kv.prefix_cache import check_cache_config
from pyagent_engine.requests.logprobs import LOGPROBS_MODES


@attrs.frozen(kw_only=True)
class EngineConfig:
    """Sizes of the KV cache and of each step.

    Attributes:
        block_size: tokens per KV-cache block.
        kv_cache_gib: memory for the caches of all layers, in GiB: a recurrent-state slot per sequence
            that may run (``max_num_seqs``) for a model with state layers, the rest in blocks.
        max_num_seqs: the most requests running at once.
        max_num_batched_tokens: the token budget of one step (prefill chunks plus decodes).
        prefix_caching: share computed full KV blocks between requests by chained hash.
        eviction: the eviction policy of the prefix cache (default: the registry's selection);
            ``eviction_options`` its options.
        kv_hash: block hash function: ``sha256``, ``xxhash`` or ``builtin``.
        offload_blocks: capacity in blocks of the host-memory tier that evicted blocks go down to (0: none).
        scheduler: the scheduling policy: waiting-queue order and preemption victim (default: the
            registry's selection, see :mod:`pyagent_engine.scheduling.policy`); ``scheduler_options`` its options.
        logprobs_mode: which distribution generated tokens' logprobs come from: ``"raw"`` (the
            model's logits) or ``"processed"`` (after the grammar mask and the sampler chain); see
            :mod:`pyagent_engine.requests.logprobs`.
        model_name: the name :attr:`EngineInfo.model` reports (the metrics' ``model_name`` label);
            ``pyagent serve`` gives its first served name, as vLLM does. ``None``: the model's path.
        enable_lora: serve LoRA adapters (vLLM's ``--enable-lora``); see :mod:`pyagent_engine.scheduling.lora_slots`.
        max_loras: adapters the model keeps loaded at once, its LoRA slots (``--max-loras``).
        max_lora_rank: the largest adapter rank a slot holds (``--max-lora-rank``).
    """

    block_size: int = 16
    kv_cache_gib: float = 1.0
    max_num_seqs: int = 32
    max_num_batched_tokens: int = 1024
    prefix_caching: bool = False
    eviction: str | None = None
    eviction_options: Mapping[str, Any] = attrs.field(factory=dict)
    kv_hash: str = "sha256"
    offload_blocks: int = 0
    scheduler: str | None = None
    scheduler_options: Mapping[str, Any] = attrs.field(factory=dict)
    logprobs_mode: str = "raw"
    model_name: str | None = None
    enable_lora: bool = False
    max_loras: int = 1
    max_lora_rank: int = 16

    def __attrs_post_init__(self) -> None:
        for name in ("block_size", "max_num_seqs", "max_num_batched_tokens", "max_loras", "max_lora_rank"):
            if getattr(self, name) <= 0:
                raise ConfigError(f"{name} must be positive, got {getattr(self, name)}")
        gib = self.kv_cache_gib
        if not (isinstance(gib, (int, float)) and math.isfinite(gib) and gib > 0):
            raise ConfigError(f"kv_cache_gib must be a positive number of GiB, got {gib}")
        if self.logprobs_mode not in LOGPROBS_MODES:
            raise ConfigError(f"logprobs_mode must be one of {', '.join(LOGPROBS_MODES)}, got {self.logprobs_mode!r}")
        check_cache_config(self)
