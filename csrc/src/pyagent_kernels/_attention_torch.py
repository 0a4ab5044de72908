"""Pure-torch paged attention: the fallback of :func:`pyagent_kernels.attention.paged_attention`.

Same contract as the C kernel (``include/pyagent/attention.h``): writes the new keys/values at their
slots, then attends sequence by sequence over the positions gathered through the block table, in
float32, causally or as the tree mask says, within the sliding window, with capped scores. Agrees
with the C kernel within float rounding (the C kernel scales the queries before the dot products
and accumulates the softmax online).
"""

from __future__ import annotations

import torch


def paged_attention_torch(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    kv_cache: torch.Tensor,
    block_tables: torch.Tensor,
    slot_mapping: torch.Tensor,
    seq_lens: torch.Tensor,
    query_start_loc: torch.Tensor,
    scale: float,
    tree_mask: torch.Tensor | None,
    window: int | None = None,
    soft_cap: float | None = None,
) -> torch.Tensor:
    """Write ``k``/``v`` at ``slot_mapping`` and return the attention output (arguments already checked)."""
    _, _, block_size, num_kv_heads, head_size = kv_cache.shape
    flat = kv_cache.view(2, -1, num_kv_heads, head_size)
    flat[0].index_copy_(0, slot_mapping, k)
    flat[1].index_copy_(0, slot_mapping, v)
    group = q.shape[1] // num_kv_heads
    out = torch.empty_like(q)
    starts = query_start_loc.tolist()
    for s, seq_len in enumerate(seq_lens.tolist()):
        lo, hi = starts[s], starts[s + 1]
        if hi == lo:
            continue
        context = seq_len - (hi - lo)
        positions = torch.arange(seq_len)
        slots = block_tables[s].long()[positions // block_size] * block_size + positions % block_size
        keys, values = flat[0, slots].float(), flat[1, slots].float()
        queries = q[lo:hi].float().view(hi - lo, num_kv_heads, group, head_size)
        scores = torch.einsum("qhgd,khd->hgqk", queries, keys) * scale
        if soft_cap is not None:
            scores = soft_cap * torch.tanh(scores / soft_cap)
        query_pos = torch.arange(context, seq_len)
        visible = positions.unsqueeze(0) <= query_pos.unsqueeze(1)
        if tree_mask is not None:
            visible[:, context:] = tree_mask[lo:hi, : hi - lo]
        if window is not None:
            key_pos = positions
            if tree_mask is not None:  # positions in the text: ctx + depth in the draft tree
                query_pos = context + visible[:, context:].sum(dim=1) - 1
                key_pos = torch.cat((positions[:context], query_pos))
            visible &= key_pos.unsqueeze(0) > (query_pos - window).unsqueeze(1)
        scores = scores.masked_fill(~visible, float("-inf"))
        peak = scores.amax(dim=-1, keepdim=True).clamp_min(torch.finfo(torch.float32).min)
        weights = (scores - peak).exp()
        total = weights.sum(dim=-1, keepdim=True)
        weights = weights / torch.where(total > 0, total, torch.ones_like(total))  # nothing visible: zeros
        attended = torch.einsum("hgqk,khd->qhgd", weights, values)
        out[lo:hi] = attended.reshape(hi - lo, -1, head_size).to(q.dtype)
    return out
