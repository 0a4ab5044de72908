"""The paged KV caches of a model: one tensor per layer, in the layout attention backends read."""

from __future__ import annotations

import math

import torch

from pyagent_core.interfaces.model import ModelConfig
from pyagent_engine.kv.memory import check_fits


def allocate_kv_caches(
    config: ModelConfig, num_blocks: int, block_size: int, dtype: torch.dtype, device: str | torch.device = "cpu"
) -> list[torch.Tensor]:
    """One zeroed paged cache per layer, ``[2, num_blocks, block_size, num_kv_heads, head_dim]``.

    Raises :class:`ConfigError` when they would not fit in the memory ``device`` has available.
    """
    shape = (2, num_blocks, block_size, config.num_kv_heads, config.head_dim)
    nbytes = math.prod(shape) * dtype.itemsize * config.num_layers
    check_fits(nbytes, torch.device(device), f"the KV cache ({num_blocks} blocks of {block_size} tokens)",
               "lower kv_cache_gib (--kv-cache-gib)")
    return [torch.zeros(shape, dtype=dtype, device=device) for _ in range(config.num_layers)]
