"""Paged attention computed directly over the block tables: decode, prefill, chunked prefill, trees.

One call writes the new keys/values into the cache at their slots and attends, reading each
sequence's cached keys/values block by block where they lie (no gather copy). All query heads of a
key/value head are processed together, so each key/value block is read once per group (GQA). The
softmax runs online (running maximum and sum) in float32; bfloat16 is widened on load. The
pure-torch fallback (:mod:`pyagent_kernels._attention_torch`) gives the same results within float
rounding.
"""

from __future__ import annotations

import math

import torch

from pyagent_kernels import _extension
from pyagent_kernels._attention_torch import paged_attention_torch
from pyagent_kernels._checks import check_tensor, paged_metadata_error
from pyagent_kernels._extension import Backend
from pyagent_kernels.errors import KernelArgumentError

__all__ = ["paged_attention"]

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
    ``tree_mask[t, j]``. A token that sees no position gets zeros.

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
        threads: most POSIX threads the C kernel spreads (sequence, kv head, query tile) items over,
            when there are at least about 2^17 (query row, position) pairs per thread; the default,
            1, runs on the calling thread (see csrc/README.md for why). The fallback ignores it.

    Every tensor must be a contiguous CPU tensor. Returns a new ``[num_tokens, num_heads,
    head_size]`` tensor of ``q``'s dtype.

    Raises:
        KernelArgumentError: wrong type, dtype, shape, layout or device; metadata values that break
            the layout (checked before anything is written).
        KernelUnavailableError: backend="c" but the extension is not built.
    """
    check_tensor(kv_cache, "kv_cache", dtypes=_CACHE_DTYPES, shape=(2, None, None, None, None), writable=True)
    _, num_blocks, block_size, num_kv_heads, head_size = kv_cache.shape
    check_tensor(q, "q", dtypes=(kv_cache.dtype,), shape=(None, None, head_size))
    num_tokens, num_heads = q.shape[:2]
    if num_heads % num_kv_heads:
        raise KernelArgumentError(
            f"q has {num_heads} heads, not a multiple of the cache's {num_kv_heads} key/value heads"
        )
    for name, tensor in (("k", k), ("v", v)):
        check_tensor(tensor, name, dtypes=(kv_cache.dtype,), shape=(num_tokens, num_kv_heads, head_size))
    check_tensor(seq_lens, "seq_lens", dtypes=(torch.int32,), shape=(None,))
    num_seqs = seq_lens.shape[0]
    check_tensor(block_tables, "block_tables", dtypes=(torch.int32,), shape=(num_seqs, None))
    check_tensor(slot_mapping, "slot_mapping", dtypes=(torch.int64,), shape=(num_tokens,))
    check_tensor(query_start_loc, "query_start_loc", dtypes=(torch.int32,), shape=(num_seqs + 1,))
    if tree_mask is not None:
        check_tensor(tree_mask, "tree_mask", dtypes=(torch.bool,), shape=(num_tokens, None))
    if not isinstance(scale, float | int) or not math.isfinite(scale):
        raise KernelArgumentError(f"scale={scale!r} must be a finite number (usually head_size ** -0.5)")
    if not isinstance(threads, int) or threads < 1:
        raise KernelArgumentError(f"threads={threads!r} must be a positive int (1: the calling thread only)")
    metadata = (block_tables, slot_mapping, seq_lens, query_start_loc)
    if _extension.resolve(backend, "paged_attention") == "torch":
        error = paged_metadata_error(num_blocks, block_size, *metadata, tree_mask)
        if error is not None:
            raise error
        return paged_attention_torch(q, k, v, kv_cache, *metadata, float(scale), tree_mask)
    ffi, lib = _extension.require()
    out = torch.empty_like(q)

    def pointer(kind: str, tensor: torch.Tensor | None) -> object:
        """``tensor``'s data as a C pointer of ``kind``, or NULL for None."""
        return ffi.NULL if tensor is None else ffi.cast(kind, tensor.data_ptr())

    err_index = ffi.new("int64_t *")
    rc = lib.pak_paged_attention(
        pointer("void *", out), pointer("void *", q), pointer("void *", k), pointer("void *", v),
        pointer("void *", kv_cache), lib.PAK_ATTN_BF16 if q.dtype == torch.bfloat16 else lib.PAK_ATTN_F32,
        num_tokens, num_heads, num_kv_heads, head_size, num_blocks, block_size,
        pointer("int32_t *", block_tables), block_tables.shape[1], pointer("int64_t *", slot_mapping),
        pointer("int32_t *", seq_lens), pointer("int32_t *", query_start_loc), num_seqs,
        pointer("uint8_t *", tree_mask), 0 if tree_mask is None else tree_mask.shape[1],
        float(scale), threads, err_index,
    )
    if rc in (lib.PAK_EPARAM, lib.PAK_EINDEX):
        error = paged_metadata_error(num_blocks, block_size, *metadata, tree_mask)
        if error is not None:
            raise error
    _extension.check_status(rc, "paged_attention")
    return out
