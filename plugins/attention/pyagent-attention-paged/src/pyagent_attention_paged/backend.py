"""The ``paged`` backend: :func:`pyagent_kernels.attention.paged_attention` behind the attention interface."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

import pyagent_kernels
from pyagent_core.interfaces.attention import AttentionBackend, AttentionContext, AttentionMetadata
from pyagent_kernels import PreparedCall
from pyagent_kernels.attention import PagedBatch, PagedLayout, prepare_paged_attention


class PagedAttention(AttentionBackend):
    """Paged attention in C over the block tables; GQA-aware, float32 softmax, any block size.

    Options:
        threads: most threads one call uses (0: torch's thread count now, as the engine's products;
            1: the calling thread only).
    """

    def __init__(self, options: Mapping[str, Any], context: AttentionContext) -> None:
        super().__init__(options, context)
        self.threads = int(self.options["threads"]) or torch.get_num_threads()
        self.soft_cap = context.logits_soft_cap
        self._layout: tuple[AttentionMetadata, PagedLayout] | None = None
        self._batch = PagedBatch()

    def layout(self, metadata: AttentionMetadata) -> PagedLayout:
        """The kernel's checked view of ``metadata``, made once for all the layers of a step."""
        if self._layout is None or self._layout[0] is not metadata:
            tree_mask = metadata.tree_mask
            self._layout = metadata, PagedLayout(
                block_tables=metadata.block_tables.contiguous(), slot_mapping=metadata.slot_mapping.contiguous(),
                seq_lens=metadata.seq_lens.contiguous(), query_start_loc=metadata.query_start_loc.contiguous(),
                tree_mask=None if tree_mask is None else tree_mask.contiguous())
        return self._layout[1]

    @classmethod
    def check_available(cls) -> str | None:
        """A reason when pyagent-kernels' C extension is not built (forward would use the torch fallback)."""
        status = pyagent_kernels.status()
        if status["compiled"]:
            return None
        return (
            f"pyagent-kernels' C extension is not built ({status['reason']}); `paged` would run on its "
            "slow pure-torch fallback: install a C compiler and reinstall pyagent-kernels"
        )

    def forward(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        kv_cache: torch.Tensor,
        metadata: AttentionMetadata,
        layer: int,
    ) -> torch.Tensor:
        """Store ``k``/``v`` at their slots, then attend; ``ValueError`` for inputs that do not fit."""
        self.check_inputs(q, k, v, kv_cache, metadata)
        return self.layout(metadata).attend(q.contiguous(), k.contiguous(), v.contiguous(), kv_cache,
                                            scale=self.scale, window=self.context.window(layer),
                                            soft_cap=self.soft_cap, threads=self.threads)

    def prepare(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        out: torch.Tensor,
        kv_cache: torch.Tensor,
        layer: int,
    ) -> PreparedCall:
        """The layer's kernel call into ``out``, over the layout :meth:`begin_step` binds (one C call
        that a kernel program runs among the layer's other calls)."""
        return prepare_paged_attention(q, k, v, out, kv_cache, self._batch, scale=self.scale,
                                       window=self.context.window(layer), soft_cap=self.soft_cap, threads=self.threads)

    def begin_step(self, metadata: AttentionMetadata) -> None:
        """Check ``metadata``'s shapes and bind its layout for the prepared calls."""
        metadata.check_shapes()
        self._batch.bind(self.layout(metadata))
