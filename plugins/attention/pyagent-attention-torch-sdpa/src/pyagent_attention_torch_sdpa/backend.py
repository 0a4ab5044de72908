"""The ``torch-sdpa`` backend: a paged KV cache read through ``torch.nn.functional.scaled_dot_product_attention``.

Keys and values are gathered token by token through the block tables (one ``index_select`` per
tensor for the whole batch), so only positions below a sequence's length are ever read. Two paths:

- **decode** (one new token per sequence): every sequence's keys/values go into one padded
  ``[num_seqs, kv_heads, length, head_size]`` tensor. With ``batch_invariant`` off, one SDPA call
  attends for the whole batch, with a key-padding mask (positions past a sequence's end repeat its
  last token, so the padding is finite and masked). With it on, each sequence gets its own SDPA
  call over exactly its own keys. The query heads of each key/value head form the query rows of
  that head (``[num_seqs, kv_heads, group, head_size]``), so grouped-query attention needs no copies.
- **prefill** (several new tokens: prefill, chunked prefill, draft trees): one SDPA call per
  sequence over its own keys/values, with a causal mask offset by its cached context, or the tree
  mask. Single-token sequences of a mixed batch still take the decode path, so a decode step gives
  the same bits whatever else shares its batch.

A layer's sliding window narrows the masks of both paths. SDPA has no score capping: a model that
caps its scores (``logits_soft_cap``) gets the same computation written out in float32 (scores,
cap, mask, softmax, weighted sum), with the same calls and masks.

Batch invariance: how torch's SDPA kernel blocks, splits and rounds a padded batch differs between
CPUs, BLAS builds and versions (padding to whole 512-key blocks kept outputs the same on AVX-512
hosts and did not on an AVX2-only Zen 1 host). So the backend does not rely on it: with
``batch_invariant`` on, a decode sequence's output comes from a call whose every input and shape
are the sequence's own, the same call alone or in any batch, whatever the kernel does inside.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from typing import Any

import torch
import torch.nn.functional as F

from pyagent_core.interfaces.attention import AttentionBackend, AttentionContext, AttentionMetadata, visible_mask


def _slots(block_tables: torch.Tensor, rows: torch.Tensor, positions: torch.Tensor, block_size: int) -> torch.Tensor:
    """Cache slots of token ``positions`` of the sequences in block-table ``rows`` (broadcast together)."""
    blocks = block_tables[rows, positions // block_size].long()
    return blocks * block_size + positions % block_size


class TorchSdpaAttention(AttentionBackend):
    """Paged attention through torch's SDPA: one batched call for decode, one per prefilling sequence.

    Options:
        batch_invariant: attend for each decode sequence in its own call over exactly its keys, so
            that its output does not depend on the other sequences of its batch. Off, one call
            attends for the whole batch, keys padded to its longest sequence.
    """

    def __init__(self, options: Mapping[str, Any], context: AttentionContext) -> None:
        super().__init__(options, context)
        self.batch_invariant = bool(self.options["batch_invariant"])
        self.soft_cap = context.logits_soft_cap

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
        flat = kv_cache.view(2, -1, self.num_kv_heads, self.head_size)
        flat[0].index_copy_(0, metadata.slot_mapping, k)
        flat[1].index_copy_(0, metadata.slot_mapping, v)
        block_size = kv_cache.shape[2]
        window = self.context.window(layer)
        if metadata.max_query_len == 1 and metadata.num_tokens == metadata.num_seqs:
            own_token = None if metadata.tree_mask is None else metadata.tree_mask[:, 0]
            return self._decode(q, flat, block_size, metadata.block_tables, metadata.seq_lens,
                                metadata.max_seq_len, own_token, window)
        return self._mixed(q, flat, block_size, metadata, window)

    def _attend(self, q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor,
                mask: torch.Tensor | None) -> torch.Tensor:
        """SDPA of ``q [..., heads, n, head_size]`` over ``keys``/``values [..., kv_heads, length,
        head_size]`` (grouped-query when fewer key heads) with a bool ``mask`` broadcast to
        ``[..., heads, n, length]`` (``None``: causal, ``n == length``); written out in float32 with
        capped scores when the model caps them (a row that sees nothing gets zeros)."""
        if self.soft_cap is None:
            return F.scaled_dot_product_attention(q, keys, values, attn_mask=mask, is_causal=mask is None,
                                                  scale=self.scale, enable_gqa=True)
        group = q.shape[-3] // keys.shape[-3]
        keys, values = keys.repeat_interleave(group, -3).float(), values.repeat_interleave(group, -3).float()
        scores = q.float() @ keys.transpose(-1, -2) * self.scale
        scores = self.soft_cap * torch.tanh(scores / self.soft_cap)
        if mask is None:
            mask = torch.ones(scores.shape[-2:], dtype=torch.bool, device=q.device).tril()
        weights = scores.masked_fill(~mask, float("-inf")).softmax(dim=-1).nan_to_num(0.0)
        return (weights @ values).to(q.dtype)

    def _gather(self, flat: torch.Tensor, slots: torch.Tensor) -> torch.Tensor:
        """``[2, len(slots), kv_heads, head_size]``: the keys and values at ``slots``."""
        out = flat.new_empty((2, slots.numel(), self.num_kv_heads, self.head_size))
        torch.index_select(flat[0], 0, slots, out=out[0])
        torch.index_select(flat[1], 0, slots, out=out[1])
        return out

    def _decode(
        self,
        q: torch.Tensor,
        flat: torch.Tensor,
        block_size: int,
        block_tables: torch.Tensor,
        seq_lens: torch.Tensor,
        max_seq_len: int,
        own_token: torch.Tensor | None,
        window: int | None,
    ) -> torch.Tensor:
        """Attention of one new token per sequence (``q[s]`` is the last token of sequence ``s``).

        Args:
            q: ``[num_seqs, num_heads, head_size]``.
            flat: the cache viewed as ``[2, num_slots, kv_heads, head_size]``, already written.
            block_size: tokens per cache block.
            block_tables: ``[num_seqs, max_blocks]`` rows of the sequences.
            seq_lens: ``[num_seqs]`` lengths including the new token; ``max_seq_len`` their maximum.
            own_token: ``bool [num_seqs]``, whether each new token sees itself (tree masks), or
                ``None`` for yes.
            window: the layer's sliding window, or ``None``.
        """
        num_seqs = q.shape[0]
        if self.batch_invariant and num_seqs > 1:
            lens = seq_lens.tolist()
            return torch.cat([
                self._decode(q[s:s + 1], flat, block_size, block_tables[s:s + 1], seq_lens[s:s + 1], lens[s],
                             None if own_token is None else own_token[s:s + 1], window)
                for s in range(num_seqs)
            ])
        length = max_seq_len
        positions = torch.arange(length, device=q.device)
        lens = seq_lens.long().unsqueeze(1)
        rows = torch.arange(num_seqs, device=q.device).unsqueeze(1)
        slots = _slots(block_tables, rows, torch.minimum(positions, lens - 1), block_size)
        keys, values = self._gather(flat, slots.flatten()).view(
            2, num_seqs, length, self.num_kv_heads, self.head_size
        ).transpose(2, 3)
        visible = positions < lens
        last = lens - 1  # the token's position in the text: one less when its tree row hides it
        if own_token is not None:
            visible &= (positions != lens - 1) | own_token.unsqueeze(1)
            last = last - (~own_token).long().unsqueeze(1)
        if window is not None:
            visible &= positions > last - window
        group = self.num_heads // self.num_kv_heads
        out = self._attend(q.reshape(num_seqs, self.num_kv_heads, group, self.head_size), keys, values,
                           visible.view(num_seqs, 1, 1, length))
        return out.reshape(num_seqs, self.num_heads, self.head_size)

    def _mixed(self, q: torch.Tensor, flat: torch.Tensor, block_size: int, md: AttentionMetadata,
               window: int | None) -> torch.Tensor:
        """Any batch: its single-token sequences through :meth:`_decode`, the others one by one."""
        out = torch.empty_like(q)
        starts = md.query_start_loc.tolist()
        seq_lens = md.seq_lens.tolist()
        query_lens = [hi - lo for lo, hi in itertools.pairwise(starts)]
        single = [s for s, n in enumerate(query_lens) if n == 1]
        if single:
            rows = torch.tensor(single, device=q.device)
            tokens = md.query_start_loc[rows].long()
            own_token = None if md.tree_mask is None else md.tree_mask[tokens, 0]
            out[tokens] = self._decode(q[tokens], flat, block_size, md.block_tables[rows], md.seq_lens[rows],
                                       max(seq_lens[s] for s in single), own_token, window)
        several = [s for s, n in enumerate(query_lens) if n > 1]
        if several:
            self._prefill(q, out, flat, block_size, md, several, starts, seq_lens, window)
        return out

    def _prefill(
        self,
        q: torch.Tensor,
        out: torch.Tensor,
        flat: torch.Tensor,
        block_size: int,
        md: AttentionMetadata,
        seqs: list[int],
        starts: list[int],
        seq_lens: list[int],
        window: int | None,
    ) -> None:
        """Attend for the sequences ``seqs`` (several new tokens each) into their rows of ``out``.

        One gather fetches the keys/values of all of them (positions ``0..seq_len-1`` each); then
        one SDPA call per sequence, with ``is_causal`` when it has no cached context, no tree and no
        window.
        """
        device = q.device
        lens = torch.tensor([seq_lens[s] for s in seqs], device=device)
        owner = torch.repeat_interleave(torch.arange(len(seqs), device=device), lens)
        first = torch.cumsum(lens, 0) - lens
        positions = torch.arange(owner.numel(), device=device) - first[owner]
        rows = torch.tensor(seqs, device=device)[owner]
        keys, values = self._gather(flat, _slots(md.block_tables, rows, positions, block_size)).transpose(1, 2)
        offset = 0
        for s in seqs:
            lo, hi, seq_len = starts[s], starts[s + 1], seq_lens[s]
            mask = None
            if seq_len > hi - lo or md.tree_mask is not None or window is not None:
                tree = None if md.tree_mask is None else md.tree_mask[lo:hi]
                mask = visible_mask(hi - lo, seq_len, tree, window, device)
            attended = self._attend(q[lo:hi].transpose(0, 1), keys[:, offset:offset + seq_len],
                                    values[:, offset:offset + seq_len], mask)
            out[lo:hi] = attended.transpose(0, 1)
            offset += seq_len
