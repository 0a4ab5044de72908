"""The caches of a model's layers as its :class:`~pyagent_core.interfaces.cache.CacheLayout` declares
them, and what one memory budget buys for them.

One budget (``kv_cache_gib``) pays for two kinds of unit: *blocks* of ``block_size`` token positions,
shared by every layer that keeps something per token (paged keys and values, MLA's latent rows; one
block table per sequence, read by all of them alike), and *state slots*, one per running sequence,
for layers that keep a fixed-size state per sequence (Mamba2, Gated DeltaNet, short convolutions;
the same slot index in every state tensor). The states of the most sequences that may run at once
(``max_num_seqs``) are set aside first and the rest of the budget buys blocks:
:meth:`CacheLayout.num_blocks <pyagent_core.interfaces.cache.CacheLayout.num_blocks>` is the one
formula. (vLLM's hybrid allocator instead cuts one pool into pages, raising the attention block size
until a page of keys and values holds at least one layer's state, and gives each request a page per
state layer as it runs; here the slots are reserved up front, unpadded, as the scheduler never runs
more than ``max_num_seqs`` sequences.) A model without per-token layers (Mamba2 alone) pays nothing
for blocks: its block tables are bookkeeping only, enough for every sequence at its full context.
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs
import torch

from pyagent_core.errors import ConfigError
from pyagent_core.interfaces.cache import CacheLayout, LatentKV, PagedKV

LayerCache = torch.Tensor | tuple[torch.Tensor, ...]
"""What one layer's forward receives in ``kv_caches[layer]``: a paged tensor, or a layer's state tensors."""

GIB = 2**30


@attrs.frozen
class CachePlan:
    """What a budget buys for a layout.

    Attributes:
        num_blocks: blocks of ``block_size`` positions (bookkeeping only when the layout keeps nothing per token).
        num_slots: state slots (0 when the layout keeps no state).
        nbytes: bytes the caches take.
    """

    num_blocks: int
    num_slots: int
    nbytes: int


def plan_caches(layout: CacheLayout, budget: int, block_size: int, max_num_seqs: int, itemsize: int,
                max_model_len: int) -> CachePlan:
    """The blocks and state slots ``budget`` bytes buy for ``layout`` (``itemsize``: the working dtype's):
    one slot per sequence that may run (``max_num_seqs``) when the layout keeps state, the rest in blocks.

    Raises :class:`ConfigError` when the slots alone exceed the budget or no block fits beside them.
    """
    num_slots = max_num_seqs if layout.stateful else 0
    try:
        num_blocks = layout.num_blocks(budget, block_size, num_slots, itemsize)
    except ValueError as error:
        raise ConfigError(f"{error} (kv_cache_gib, --kv-cache-gib; max_num_seqs, --max-num-seqs)") from None
    states = num_slots * layout.bytes_per_sequence()
    if not layout.paged:
        return CachePlan(max_num_seqs * -(-max_model_len // block_size), num_slots, states)
    if num_blocks == 0:
        raise ConfigError(f"the cache budget of {budget / GIB:.4f} GiB buys no block of {block_size} tokens "
                          f"({block_size * layout.bytes_per_token(itemsize)} bytes) beside {num_slots} state slots "
                          f"({states} bytes); raise kv_cache_gib (--kv-cache-gib)")
    return CachePlan(num_blocks, num_slots, states + num_blocks * block_size * layout.bytes_per_token(itemsize))


class LayerCaches:
    """Every layer's cache tensors, allocated as ``layout`` declares them.

    Args:
        layout: the model's per-layer records.
        plan: the blocks and slots to allocate (:func:`plan_caches`).
        block_size: positions per block.
        dtype: the paged caches' dtype (the model's working dtype; states are float32).
        device: where the tensors live.
    """

    def __init__(self, layout: CacheLayout, plan: CachePlan, block_size: int, dtype: torch.dtype,
                 device: torch.device | str = "cpu") -> None:
        self.layout = layout
        self.block_size = block_size
        self.tensors: list[LayerCache] = layout.allocate(plan.num_blocks if layout.paged else 0, block_size,
                                                         plan.num_slots, dtype, device)
        """Every layer's cache, in layer order: the ``kv_caches`` of the model's forward."""

    def _per_token(self) -> list[tuple[torch.Tensor, bool]]:
        """The per-token caches in layer order, each with whether it holds keys and values (a leading axis of 2)."""
        return [(tensor, isinstance(record, PagedKV))
                for record, tensor in zip(self.layout.layers, self.tensors, strict=True)
                if isinstance(record, PagedKV | LatentKV) and isinstance(tensor, torch.Tensor)]

    def by_block(self) -> list[torch.Tensor]:
        """The per-token caches as block-major views, ``view[block_id]`` one block of a layer (keys and
        values ``[2, block_size, heads, head_size]``, latent rows ``[block_size, width]``), in layer order."""
        return [tensor.transpose(0, 1) if pairs else tensor for tensor, pairs in self._per_token()]

    def move_tokens(self, src: Sequence[int], dst: Sequence[int]) -> None:
        """Copy what every per-token layer keeps for the token at cache slot ``src[i]`` to slot ``dst[i]``
        (a state layer keeps nothing per token)."""
        source, target = torch.tensor(src), torch.tensor(dst)
        for tensor, pairs in self._per_token():
            if pairs:
                flat = tensor.view(2, -1, *tensor.shape[3:])
                flat[:, target] = flat[:, source]
            else:
                rows = tensor.view(-1, tensor.shape[-1])
                rows[target] = rows[source]
