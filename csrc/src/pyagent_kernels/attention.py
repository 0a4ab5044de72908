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
from pyagent_kernels._checks import check_separate, check_tensor, paged_metadata_error
from pyagent_kernels._extension import Backend, PreparedCall, torch_call
from pyagent_kernels._fast_checks import all_plain
from pyagent_kernels.errors import KernelArgumentError

__all__ = ["PagedBatch", "PagedLayout", "paged_attention", "prepare_paged_attention"]

_CACHE_DTYPES = (torch.float32, torch.bfloat16)


def _check_options(scale: float, window: int | None, soft_cap: float | None, threads: int) -> None:
    """Raise KernelArgumentError for an option of :func:`paged_attention` that is not allowed."""
    if not isinstance(scale, (float, int)) or not math.isfinite(scale):
        raise KernelArgumentError(f"scale={scale!r} must be a finite number (usually head_size ** -0.5)")
    if window is not None and (type(window) is not int or window < 1):
        raise KernelArgumentError(f"window={window!r} must be a positive int (None: no sliding window)")
    if soft_cap is not None and (isinstance(soft_cap, bool) or not isinstance(soft_cap, (float, int))
                                 or not 0 < soft_cap < math.inf):
        raise KernelArgumentError(f"soft_cap={soft_cap!r} must be a positive finite number (None: no capping)")
    if not isinstance(threads, int) or threads < 1:
        raise KernelArgumentError(f"threads={threads!r} must be a positive int (1: the calling thread only)")


def _fits(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, kv_cache: torch.Tensor, num_tokens: int) -> bool:
    """Whether :func:`_check_layer` would pass, answered in a few attribute reads for plain tensors (a
    layer's usual case); False sends the call through it for its error."""
    if not (type(kv_cache) is torch.Tensor and kv_cache.dtype in _CACHE_DTYPES
            and all_plain(kv_cache.dtype, q, k, v, kv_cache) and not kv_cache.requires_grad):
        return False
    cache_shape, q_shape, kv_shape = kv_cache.shape, q.shape, k.shape
    return (len(cache_shape) == 5 and cache_shape[0] == 2 and len(q_shape) == 3 and len(kv_shape) == 3
            and v.shape == kv_shape and kv_shape[0] == q_shape[0] == num_tokens
            and kv_shape[1] == cache_shape[3] and kv_shape[2] == q_shape[2] == cache_shape[4]
            and q_shape[1] % kv_shape[1] == 0)


def _check_layer(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, kv_cache: torch.Tensor, num_tokens: int) -> None:
    """Raise KernelArgumentError for a layer's tensors that do not fit each other or ``num_tokens``."""
    check_tensor(kv_cache, "kv_cache", dtypes=_CACHE_DTYPES, shape=(2, None, None, None, None), writable=True)
    _, _, _, num_kv_heads, head_size = kv_cache.shape
    check_tensor(q, "q", dtypes=(kv_cache.dtype,), shape=(num_tokens, None, head_size))
    if q.shape[1] % num_kv_heads:
        raise KernelArgumentError(
            f"q has {q.shape[1]} heads, not a multiple of the cache's {num_kv_heads} key/value heads"
        )
    for name, tensor in (("k", k), ("v", v)):
        check_tensor(tensor, name, dtypes=(kv_cache.dtype,), shape=(num_tokens, num_kv_heads, head_size))


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
    window: int | None = None,
    soft_cap: float | None = None,
    backend: Backend = "auto",
    threads: int = 1,
) -> torch.Tensor:
    """Store ``k``/``v`` in the paged cache at ``slot_mapping``, then attend; return the output.

    The layout is the one of ``pyagent_core.interfaces.attention``: sequence ``s`` owns new tokens
    ``query_start_loc[s]:query_start_loc[s + 1]`` at positions ``seq_lens[s] - query_len`` ..
    ``seq_lens[s] - 1``; position ``p`` lives at block ``block_tables[s, p // block_size]``, offset
    ``p % block_size``. Each new token sees every cached position of its sequence and the new tokens
    up to itself, or (``tree_mask``) the ``j``-th new token of its sequence where
    ``tree_mask[t, j]``; with a ``window``, only the positions ``j`` with ``pos - window < j <= pos``
    of those (with a tree mask, positions in the text: ``ctx + `` the number of new tokens of its
    sequence a token's row sees ``- 1``). A token that sees no position gets zeros. One call is
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
        window: a sliding window (positive), or ``None`` for none.
        soft_cap: a positive cap ``c``: scores ``s = scale * q . k`` become ``c * tanh(s / c)``;
            ``None`` leaves them as they are.
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
    return layout.attend(q, k, v, kv_cache, scale=scale, window=window, soft_cap=soft_cap, backend=backend,
                         threads=threads)


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
        self._err_index: object = None

    def _c_arguments(self, ffi: Any) -> tuple[object, ...]:
        """The metadata's arguments of ``pak_paged_attention``, made once, and its error-index output."""
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
            self._err_index = ffi.new("int64_t *")  # written only on an error, which is recomputed in Python
        return self._pointers

    def _check_values(self, num_blocks: int, block_size: int) -> None:
        """Raise KernelArgumentError for metadata values that do not fit a cache of ``num_blocks``
        blocks of ``block_size`` positions."""
        error = paged_metadata_error(num_blocks, block_size, *self.metadata, self.tree_mask)
        if error is not None:
            raise error

    def attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, kv_cache: torch.Tensor, *, scale: float,
               window: int | None = None, soft_cap: float | None = None, backend: Backend = "auto",
               threads: int = 1) -> torch.Tensor:
        """:func:`paged_attention` of one layer's tensors with this metadata."""
        if not _fits(q, k, v, kv_cache, self.num_tokens):
            _check_layer(q, k, v, kv_cache, self.num_tokens)
        _check_options(scale, window, soft_cap, threads)
        _, num_blocks, block_size, num_kv_heads, head_size = kv_cache.shape
        ext = _extension.c_extension(backend, "paged_attention")
        if ext is None:
            self._check_values(num_blocks, block_size)
            return paged_attention_torch(q, k, v, kv_cache, *self.metadata, float(scale), self.tree_mask, window,
                                         None if soft_cap is None else float(soft_cap))
        ffi, lib = ext.ffi, ext.lib
        out = torch.empty_like(q)
        rc = lib.pak_paged_attention(
            ffi.cast("void *", out.data_ptr()), ffi.cast("void *", q.data_ptr()), ffi.cast("void *", k.data_ptr()),
            ffi.cast("void *", v.data_ptr()), ffi.cast("void *", kv_cache.data_ptr()),
            lib.PAK_ATTN_BF16 if q.dtype is torch.bfloat16 else lib.PAK_ATTN_F32,
            self.num_tokens, q.shape[1], num_kv_heads, head_size, num_blocks, block_size,
            *self._c_arguments(ffi), float(scale), window or 0, float(soft_cap or 0.0), threads, self._err_index,
        )
        if rc:
            if rc in (lib.PAK_EPARAM, lib.PAK_EINDEX):
                self._check_values(num_blocks, block_size)
            _extension.check_status(rc, "paged_attention")
        return out


class PagedBatch:
    """The batch layout that prepared attention calls (:func:`prepare_paged_attention`) read each
    time they run: :meth:`bind` a step's :class:`PagedLayout` before running them. In C memory when
    the extension is built, so a call run inside a :class:`~pyagent_kernels.program.Program` reads it
    without Python."""

    def __init__(self) -> None:
        ext = _extension.load()
        self._struct: Any = None if ext.lib is None else ext.ffi.new("pak_attn_batch *")
        #: The bound layout (``None`` before the first :meth:`bind`); it keeps the step's tensors alive.
        self.layout: PagedLayout | None = None

    def bind(self, layout: PagedLayout) -> None:
        """Make the prepared calls read ``layout`` (its tensors must not change while it is bound)."""
        if self._struct is not None:
            ffi = _extension.require()[0]
            (tables, max_blocks, slots, seq_lens, starts, num_seqs, tree, tree_width) = layout._c_arguments(ffi)
            batch = self._struct
            batch.block_tables, batch.max_blocks, batch.slot_mapping = tables, max_blocks, slots
            batch.num_tokens, batch.seq_lens, batch.query_start_loc = layout.num_tokens, seq_lens, starts
            batch.num_seqs, batch.tree_mask, batch.tree_width = num_seqs, tree, tree_width
        self.layout = layout


def prepare_paged_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor,
                            kv_cache: torch.Tensor, batch: PagedBatch, *, scale: float, window: int | None = None,
                            soft_cap: float | None = None, threads: int = 1, backend: Backend = "auto") -> PreparedCall:
    """One layer's :func:`paged_attention` into ``out``, prepared once and run any number of times over
    the layout ``batch`` holds when it runs (:func:`~pyagent_kernels.run_prepared`, or inside a
    :class:`~pyagent_kernels.program.Program`): the same kernel as :meth:`PagedLayout.attend`, so the
    same values, written into ``out`` (``q``'s shape and dtype) instead of a new tensor.

    Raises:
        KernelArgumentError: tensors that do not fit each other (as :func:`paged_attention` checks
            them), or a bad option. When run: the bound layout's error (no layout bound, one with
            another number of tokens than ``q``'s, or values that break the cache's layout).
    """
    check_tensor(q, "q", dtypes=_CACHE_DTYPES, shape=(None, None, None))
    if not _fits(q, k, v, kv_cache, q.shape[0]):
        _check_layer(q, k, v, kv_cache, q.shape[0])
    check_tensor(out, "out", dtypes=(q.dtype,), shape=tuple(q.shape), writable=True)
    check_separate("paged_attention", {"out": out}, {"q": q, "k": k, "v": v, "kv_cache": kv_cache})
    _check_options(scale, window, soft_cap, threads)
    _, num_blocks, block_size, num_kv_heads, head_size = kv_cache.shape
    tensors = (q, k, v, out, kv_cache, batch)

    def bound() -> PagedLayout:
        layout = batch.layout
        if layout is None:
            raise KernelArgumentError("paged_attention: no batch layout is bound; call PagedBatch.bind(layout) "
                                      "before running the prepared call")
        if layout.num_tokens != q.shape[0]:
            raise KernelArgumentError(
                f"paged_attention: the bound layout has {layout.num_tokens} new tokens, but this call was "
                f"prepared for {q.shape[0]} (the rows of q); prepare a call for that many tokens"
            )
        return layout

    ext = _extension.c_extension(backend, "paged_attention")
    if ext is None:
        def fallback() -> torch.Tensor:
            layout = bound()
            layout._check_values(num_blocks, block_size)
            return paged_attention_torch(q, k, v, kv_cache, *layout.metadata, float(scale), layout.tree_mask, window,
                                         None if soft_cap is None else float(soft_cap))

        return torch_call("paged_attention", fallback, (out,), tensors)
    ffi, lib = ext.ffi, ext.lib
    call = ffi.new("pak_attn_call *")
    call.out, call.q, call.k = (ffi.cast("void *", t.data_ptr()) for t in (out, q, k))
    call.v, call.kv_cache = ffi.cast("void *", v.data_ptr()), ffi.cast("void *", kv_cache.data_ptr())
    call.dtype = lib.PAK_ATTN_BF16 if q.dtype is torch.bfloat16 else lib.PAK_ATTN_F32
    call.num_tokens, call.num_heads, call.num_kv_heads = q.shape[0], q.shape[1], num_kv_heads
    call.head_size, call.num_blocks, call.block_size = head_size, num_blocks, block_size
    call.scale, call.window, call.soft_cap = float(scale), window or 0, float(soft_cap or 0.0)
    call.num_threads, call.batch = threads, batch._struct

    def explain(rc: int) -> None:
        if rc in (lib.PAK_EPARAM, lib.PAK_EINDEX):
            bound()._check_values(num_blocks, block_size)

    return PreparedCall(lib.pak_paged_attention_call, (call,), "paged_attention", (*tensors, call), explain)
