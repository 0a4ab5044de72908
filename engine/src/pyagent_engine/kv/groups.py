"""Cache groups: the layers of a model whose caches are allocated alike.

The KV manager (:mod:`pyagent_engine.kv.manager`) holds one memory budget for every layer's cache
and hands out two kinds of unit from it: *blocks* of ``block_size`` token positions, shared by every
layer that keeps something per token (one block table per sequence, read by all of them alike), and
*state slots*, one per running sequence, for layers that keep a fixed-size state per sequence
(recurrent mixers). A group says what one unit costs in its layers and owns their tensors: the
manager sizes the budget from the groups (:func:`blocks_in_budget`) and asks the groups to move
tokens when a draft is accepted. :class:`PagedKVGroup` holds paged keys and values, the layout of
:mod:`pyagent_core.interfaces.attention`; a group of per-sequence states fills in the same methods
with ``bytes_per_sequence``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence

import torch

from pyagent_core.errors import ConfigError
from pyagent_core.interfaces.model import ModelConfig

LayerCache = torch.Tensor | tuple[torch.Tensor, ...]
"""What one layer's forward receives in ``kv_caches[layer]``: a paged tensor, or a layer's state tensors."""


class CacheGroup(ABC):
    """Layers whose caches are allocated alike, and what one unit of each kind costs in them.

    Args:
        layers: the model layers the group holds, in order.
    """

    def __init__(self, layers: Sequence[int]) -> None:
        self.layers = tuple(layers)
        self.caches: list[LayerCache] = []

    @abstractmethod
    def bytes_per_token(self) -> int:
        """Bytes one token position costs across the group's layers (0 for per-sequence state)."""

    @abstractmethod
    def bytes_per_sequence(self) -> int:
        """Bytes one sequence's state slot costs across the group's layers (0 for per-token caches)."""

    @abstractmethod
    def _allocate(self, num_blocks: int, block_size: int, num_slots: int,
                  device: torch.device | str) -> list[LayerCache]:
        """The group's zeroed caches, one per layer of :attr:`layers`."""

    def allocate(self, num_blocks: int, block_size: int, num_slots: int = 0,
                 device: torch.device | str = "cpu") -> list[LayerCache]:
        """Allocate (zeroed) and keep the group's caches for ``num_blocks`` blocks of ``block_size``
        positions and ``num_slots`` state slots; return them, one per layer of :attr:`layers`."""
        self.caches = self._allocate(num_blocks, block_size, num_slots, device)
        return self.caches

    @abstractmethod
    def move_tokens(self, src: Sequence[int], dst: Sequence[int]) -> None:
        """Copy what the group keeps for the token at cache slot ``src[i]`` to slot ``dst[i]``, in every layer."""


class PagedKVGroup(CacheGroup):
    """Paged keys and values: per layer ``[2, num_blocks, block_size, num_kv_heads, head_size]``.

    Args:
        layers: the model layers it holds.
        num_kv_heads: key/value heads per layer.
        head_size: size of each head.
        dtype: the caches' dtype (the model's working dtype).
    """

    def __init__(self, layers: Sequence[int], num_kv_heads: int, head_size: int, dtype: torch.dtype) -> None:
        super().__init__(layers)
        self.num_kv_heads = num_kv_heads
        self.head_size = head_size
        self.dtype = dtype

    @classmethod
    def of_model(cls, config: ModelConfig, dtype: torch.dtype) -> PagedKVGroup:
        """Every layer of an attention-only model with ``config``'s heads, in ``dtype``."""
        return cls(range(config.num_layers), config.num_kv_heads, config.head_dim, dtype)

    def bytes_per_token(self) -> int:
        """``2 * num_kv_heads * head_size * itemsize`` per layer."""
        return 2 * self.num_kv_heads * self.head_size * self.dtype.itemsize * len(self.layers)

    def bytes_per_sequence(self) -> int:
        """0: keys and values cost per token."""
        return 0

    def _allocate(self, num_blocks: int, block_size: int, num_slots: int,
                  device: torch.device | str) -> list[LayerCache]:
        shape = (2, num_blocks, block_size, self.num_kv_heads, self.head_size)
        return [torch.zeros(shape, dtype=self.dtype, device=device) for _ in self.layers]

    def move_tokens(self, src: Sequence[int], dst: Sequence[int]) -> None:
        """Copy the keys and values at slots ``src`` to slots ``dst`` in every layer."""
        source, target = torch.tensor(src), torch.tensor(dst)
        for cache in self.caches:
            assert isinstance(cache, torch.Tensor)
            flat = cache.view(2, -1, *cache.shape[3:])
            flat[:, target] = flat[:, source]


def blocks_in_budget(groups: Sequence[CacheGroup], budget: int, block_size: int, num_slots: int) -> int:
    """How many blocks of ``block_size`` positions ``budget`` bytes buy across ``groups`` once
    ``num_slots`` state slots are set aside (at least 1).

    Raises :class:`ConfigError` when the state slots alone exceed the budget.
    """
    states = num_slots * sum(group.bytes_per_sequence() for group in groups)
    if states > budget:
        raise ConfigError(f"{num_slots} sequences' state slots need {states / 2**30:.3f} GiB, more than the "
                          f"cache budget of {budget / 2**30:.3f} GiB; raise kv_cache_gib or lower max_num_seqs")
    per_block = block_size * sum(group.bytes_per_token() for group in groups)
    return max(1, (budget - states) // per_block) if per_block else 1
