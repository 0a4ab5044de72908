"""Pure-torch fallbacks of the mixer kernels (:mod:`pyagent_kernels.mixers`): each sequence token by token.

The convolution repeats the C kernel's operations in its order (bit-identical but for SiLU's ``exp``);
the scan, the delta rule and latent attention compute the same recurrences with torch's reductions,
so they agree with the kernel within float32 rounding.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def _fresh(seq_lens: list[int], starts: list[int], s: int) -> bool:
    """Whether sequence ``s`` has no context (it starts from the zero state)."""
    return seq_lens[s] == starts[s + 1] - starts[s]


def short_conv_torch(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, state: torch.Tensor,
                     query_start_loc: torch.Tensor, seq_lens: torch.Tensor, state_slots: torch.Tensor,
                     silu: bool) -> torch.Tensor:
    """The causal depthwise convolution of every sequence, its window kept in ``state``."""
    starts, lens, slots = query_start_loc.tolist(), seq_lens.tolist(), state_slots.tolist()
    width = weight.shape[1]
    out = torch.empty_like(x)
    for s, slot in enumerate(slots):
        lo, hi = starts[s], starts[s + 1]
        past = torch.zeros_like(state[slot]) if _fresh(lens, starts, s) else state[slot]
        inputs = torch.cat((past.T, x[lo:hi]))  # [width - 1 + n, channels]
        acc = torch.zeros_like(x[lo:hi])
        for j in range(width):
            acc += weight[:, j] * inputs[j:j + hi - lo]
        if bias is not None:
            acc += bias
        out[lo:hi] = F.silu(acc) if silu else acc
        state[slot] = inputs[hi - lo:].T
    return out


def ssd_torch(x: torch.Tensor, dt: torch.Tensor, A: torch.Tensor, B: torch.Tensor, C: torch.Tensor, D: torch.Tensor,
              dt_bias: torch.Tensor, state: torch.Tensor, query_start_loc: torch.Tensor, seq_lens: torch.Tensor,
              state_slots: torch.Tensor, dt_limit: tuple[float, float]) -> torch.Tensor:
    """Mamba2's selective scan, one token at a time."""
    starts, lens, slots = query_start_loc.tolist(), seq_lens.tolist(), state_slots.tolist()
    heads, groups = x.shape[1], B.shape[1]
    y = torch.empty_like(x)
    for s, slot in enumerate(slots):
        S = torch.zeros_like(state[slot]) if _fresh(lens, starts, s) else state[slot].clone()
        for t in range(starts[s], starts[s + 1]):
            delta = F.softplus(dt[t] + dt_bias).clamp(*dt_limit)  # [heads]
            Bh = B[t].repeat_interleave(heads // groups, dim=0)  # [heads, state]
            Ch = C[t].repeat_interleave(heads // groups, dim=0)
            S = S * torch.exp(delta * A)[:, None, None] + (delta[:, None] * Bh)[:, None, :] * x[t][:, :, None]
            y[t] = (S @ Ch[:, :, None]).squeeze(-1) + D[:, None] * x[t]
        state[slot] = S
    return y


def gated_delta_torch(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor, beta: torch.Tensor,
                      state: torch.Tensor, query_start_loc: torch.Tensor, seq_lens: torch.Tensor,
                      state_slots: torch.Tensor, scale: float) -> torch.Tensor:
    """The gated delta rule, one token at a time."""
    starts, lens, slots = query_start_loc.tolist(), seq_lens.tolist(), state_slots.tolist()
    repeat = v.shape[1] // q.shape[1]
    o = torch.empty_like(v)
    for s, slot in enumerate(slots):
        S = torch.zeros_like(state[slot]) if _fresh(lens, starts, s) else state[slot].clone()  # [Hv, K, V]
        for t in range(starts[s], starts[s + 1]):
            qt = q[t].repeat_interleave(repeat, dim=0) * scale
            kt = k[t].repeat_interleave(repeat, dim=0)
            S = S * torch.exp(g[t])[:, None, None]
            memory = (S * kt[:, :, None]).sum(dim=1)
            S = S + kt[:, :, None] * ((v[t] - memory) * beta[t][:, None])[:, None, :]
            o[t] = (S * qt[:, :, None]).sum(dim=1)
        state[slot] = S
    return o


def mla_torch(q_nope: torch.Tensor, q_pe: torch.Tensor, latent: torch.Tensor, k_pe: torch.Tensor,
              w_uk: torch.Tensor, w_uv: torch.Tensor, cache: torch.Tensor, block_tables: torch.Tensor,
              slot_mapping: torch.Tensor, seq_lens: torch.Tensor, query_start_loc: torch.Tensor,
              scale: float) -> torch.Tensor:
    """Absorbed multi-head latent attention over the paged latent cache, sequence by sequence."""
    size = latent.shape[1]
    block_size = cache.shape[1]
    rows = cache.view(-1, cache.shape[2])
    rows[slot_mapping] = torch.cat((latent, k_pe), dim=1)
    starts, lens = query_start_loc.tolist(), seq_lens.tolist()
    out = q_nope.new_empty((q_nope.shape[0], q_nope.shape[1], w_uv.shape[1]))
    for s, length in enumerate(lens):
        lo, hi = starts[s], starts[s + 1]
        positions = torch.arange(length)
        cached = rows[block_tables[s].long()[positions // block_size] * block_size + positions % block_size]
        absorbed = torch.einsum("thn,hnl->thl", q_nope[lo:hi], w_uk)
        scores = (torch.einsum("thl,jl->thj", absorbed, cached[:, :size])
                  + torch.einsum("thr,jr->thj", q_pe[lo:hi], cached[:, size:])) * scale
        visible = positions[None, :] <= torch.arange(length - (hi - lo), length)[:, None]
        weights = scores.masked_fill(~visible[:, None, :], float("-inf")).softmax(dim=-1)
        out[lo:hi] = torch.einsum("thl,hvl->thv", weights @ cached[:, :size], w_uv)
    return out
