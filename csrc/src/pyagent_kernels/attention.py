"""Paged attention computed directly over the block tables: decode, prefill, chunked prefill, trees.

One call writes the new keys/values into the cache at their slots and attends, reading each
sequence's cached keys/values block by block where they lie (no gather copy). All query heads of a
key/value head are processed together, so each key/value block is read once per group (GQA). The
softmax runs online (running maximum and sum) in float32; bfloat16 is widened on load. The
pure-torch fallback (:mod:`pyagent_kernels._attention_torch`) gives the same results within float
rounding.

A step's metadata is shared by every layer: :class:`PagedLayout` checks it once and keeps what the C
call needs, so each layer's :meth:`PagedLayout.attend` checks only its own tensors.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from pyagent_kernels import _extension
from pyagent_kernels._attention_torch import paged_attention_torch
from pyagent_kernels._checks import check_tensor, paged_metadata_error
from pyagent_kernels._extension import Backend
from pyagent_kernels.errors import KernelArgumentError

__all__ = ["PagedLayout", "paged_attention"]

_CACHE_DTYPES = (torch.float32, torch.bfloat16)


def paged_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    kv_cache: torch.Tensor,
    *,
    block_tables: torch.Tensor,
    slot_mapping: torch.Tensor,
    seq_lens: torch.Tensor,
    query_start_loc: torch.Tensor,
    scale: float,
    tree_mask: torch.Tensor | None = None,
    backend: Backend = "auto",
    threads: int = 1,
) -> torch.Tensor:
    """Store ``k``/``v`` in the paged cache at ``slot_mapping``, then attend; return the output.

    The layout is the one of ``pyagent_core.interfaces.attention``: sequence ``s`` owns new tokens
    ``query_start_loc[s]:query_start_loc[s + 1]`` at positions ``seq_lens[s] - query_len`` ..
    ``seq_lens[s] - 1``; position ``p`` lives at block ``block_tables[s, p // block_size]``, offset
    ``p % block_size``. Each new token sees every cached position of its sequence and the new tokens
    up to itself, or (``tree_mask``) the ``j``-th new token of its sequence where
    ``tree_mask[t, j]``. A token that sees no position gets zeros. One call is
    ``PagedLayout(block_tables, ...).attend(q, k, v, kv_cache, ...)``.

    Args:
        q: ``[num_tokens, num_heads, head_size]``, the cache's dtype.
        k, v: ``[num_tokens, num_kv_heads, head_size]``, the cache's dtype; ``num_kv_heads`` divides
            ``num_heads``.
        kv_cache: float32 or bfloat16 ``[2, num_blocks, block_size, num_kv_heads, head_size]`` (any
            block size, any head size); modified in place at the slots only.
        block_tables: int32 ``[num_seqs, max_blocks]``; entries past a sequence's blocks are not read.
        slot_mapping: int64 ``[num_tokens]``. seq_lens: int32 ``[num_seqs]``.
        query_start_loc: int32 ``[num_seqs + 1]``.
        scale: finite factor for ``q . k``.
        tree_mask: optional bool ``[num_tokens, width]``, ``width`` at least the longest query.
        backend: "auto" (C if built, else torch with a one-time warning), "c" or "torch".
        threads: most threads the C kernel spreads (sequence, kv head, query tile) items over (the
            caller and the persistent helpers it shares with the linear kernel), when there are at
            least about 2^11 (query row, position) pairs per thread; the default, 1, runs on the
            calling thread. The fallback ignores it.

    Every tensor must be a contiguous CPU tensor. Returns a new ``[num_tokens, num_heads,
    head_size]`` tensor of ``q``'s dtype.

    Raises:
        KernelArgumentError: wrong type, dtype, shape, layout or device; metadata values that break
            the layout (checked before anything is written).
        KernelUnavailableError: backend="c" but the extension is not built.
    """
    layout = PagedLayout(block_tables=block_tables, slot_mapping=slot_mapping, seq_lens=seq_lens,
                         query_start_loc=query_start_loc, tree_mask=tree_mask)
    return layout.attend(q, k, v, kv_cache, scale=scale, backend=backend, threads=threads)


class PagedLayout:
    """A step's paged-attention metadata, checked once for every layer that attends with it.

    Args: ``block_tables``, ``slot_mapping``, ``seq_lens``, ``query_start_loc`` and ``tree_mask``
    as in :func:`paged_attention`. Their values are checked against each cache they are used with
    (in C, or before the fallback runs); the tensors must not change while the layout is in use.

    Raises:
        KernelArgumentError: a tensor of the wrong type, dtype, shape, layout or device.
    """

    def __init__(self, *, block_tables: torch.Tensor, slot_mapping: torch.Tensor, seq_lens: torch.Tensor,
                 query_start_loc: torch.Tensor, tree_mask: torch.Tensor | None = None) -> None:
        check_tensor(seq_lens, "seq_lens", dtypes=(torch.int32,), shape=(None,))
        self.num_seqs = seq_lens.shape[0]
        check_tensor(block_tables, "block_tables", dtypes=(torch.int32,), shape=(self.num_seqs, None))
        check_tensor(slot_mapping, "slot_mapping", dtypes=(torch.int64,), shape=(None,))
        self.num_tokens = slot_mapping.shape[0]
        check_tensor(query_start_loc, "query_start_loc", dtypes=(torch.int32,), shape=(self.num_seqs + 1,))
        if tree_mask is not None:
            check_tensor(tree_mask, "tree_mask", dtypes=(torch.bool,), shape=(self.num_tokens, None))
        self.metadata = (block_tables, slot_mapping, seq_lens, query_start_loc)
        self.tree_mask = tree_mask
        self._pointers: tuple[object, ...] | None = None

    def _c_arguments(self, ffi: Any) -> tuple[object, ...]:
        """The metadata's arguments of ``pak_paged_attention``, made once."""
        if self._pointers is None:
            block_tables, slot_mapping, seq_lens, query_start_loc = self.metadata
            tree = self.tree_mask
            self._pointers = (
                ffi.cast("int32_t *", block_tables.data_ptr()), block_tables.shape[1],
                ffi.cast("int64_t *", slot_mapping.data_ptr()), ffi.cast("int32_t *", seq_lens.data_ptr()),
                ffi.cast("int32_t *", query_start_loc.data_ptr()), self.num_seqs,
                ffi.NULL if tree is None else ffi.cast("uint8_t *", tree.data_ptr()),
                0 if tree is None else tree.shape[1],
            )
        return self._pointers

    def attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, kv_cache: torch.Tensor, *, scale: float,
               backend: Backend = "auto", threads: int = 1) -> torch.Tensor:
        """:func:`paged_attention` of one layer's tensors with this metadata."""
        check_tensor(kv_cache, "kv_cache", dtypes=_CACHE_DTYPES, shape=(2, None, None, None, None), writable=True)
        _, num_blocks, block_size, num_kv_heads, head_size = kv_cache.shape
        num_tokens = self.num_tokens
        check_tensor(q, "q", dtypes=(kv_cache.dtype,), shape=(num_tokens, None, head_size))
        num_heads = q.shape[1]
        if num_heads % num_kv_heads:
            raise KernelArgumentError(
                f"q has {num_heads} heads, not a multiple of the cache's {num_kv_heads} key/value heads"
            )
        for name, tensor in (("k", k), ("v", v)):
            check_tensor(tensor, name, dtypes=(kv_cache.dtype,), shape=(num_tokens, num_kv_heads, head_size))
        if not isinstance(scale, float | int) or not math.isfinite(scale):
            raise KernelArgumentError(f"scale={scale!r} must be a finite number (usually head_size ** -0.5)")
        if not isinstance(threads, int) or threads < 1:
            raise KernelArgumentError(f"threads={threads!r} must be a positive int (1: the calling thread only)")
        if _extension.resolve(backend, "paged_attention") == "torch":
            error = paged_metadata_error(num_blocks, block_size, *self.metadata, self.tree_mask)
            if error is not None:
                raise error
            return paged_attention_torch(q, k, v, kv_cache, *self.metadata, float(scale), self.tree_mask)
        ffi, lib = _extension.require()
        out = torch.empty_like(q)
        err_index = ffi.new("int64_t *")
        rc = lib.pak_paged_attention(
            ffi.cast("void *", out.data_ptr()), ffi.cast("void *", q.data_ptr()), ffi.cast("void *", k.data_ptr()),
            ffi.cast("void *", v.data_ptr()), ffi.cast("void *", kv_cache.data_ptr()),
            lib.PAK_ATTN_BF16 if q.dtype == torch.bfloat16 else lib.PAK_ATTN_F32,
            num_tokens, num_heads, num_kv_heads, head_size, num_blocks, block_size,
            *self._c_arguments(ffi), float(scale), threads, err_index,
        )
        if rc in (lib.PAK_EPARAM, lib.PAK_EINDEX):
            error = paged_metadata_error(num_blocks, block_size, *self.metadata, self.tree_mask)
            if error is not None:
                raise error
        _extension.check_status(rc, "paged_attention")
        return out
