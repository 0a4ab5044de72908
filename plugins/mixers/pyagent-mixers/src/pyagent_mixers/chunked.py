"""Chunked scans of one sequence in torch: Mamba2's state space duality and the gated delta rule.

A prefill of ``T`` tokens runs in ``ceil(T / chunk)`` chunks. Within a chunk every token's output is
a masked matrix product over the chunk's tokens (the "attention-like" form), plus the contribution of
the state the chunk starts from; between chunks only the state travels, decayed by the chunk's total
decay and updated by its tokens. Both start from a given state and return the final one, so a
chunked prefill's pieces and the decode steps after it continue each other. Everything runs in
float32; the padding of the last chunk carries no decay and no input, so it changes nothing.
"""

from __future__ import annotations

import torch


def _pad_chunks(tensor: torch.Tensor, chunk: int) -> torch.Tensor:
    """``tensor [T, ...]`` zero-padded to a multiple of ``chunk`` and viewed ``[chunks, chunk, ...]``."""
    pad = -tensor.shape[0] % chunk
    if pad:
        tensor = torch.cat((tensor, tensor.new_zeros((pad, *tensor.shape[1:]))))
    return tensor.view(-1, chunk, *tensor.shape[1:])


def _decay_matrix(cumulative: torch.Tensor, strict: bool = False) -> torch.Tensor:
    """``exp(cumulative[..., i] - cumulative[..., j])`` for ``j <= i`` (``j < i`` when ``strict``), else 0."""
    chunk = cumulative.shape[-1]
    above = torch.ones(chunk, chunk, dtype=torch.bool, device=cumulative.device).triu(0 if strict else 1)
    return (cumulative[..., :, None] - cumulative[..., None, :]).masked_fill(above, float("-inf")).exp()


def ssd_chunked(x: torch.Tensor, delta: torch.Tensor, A: torch.Tensor, B: torch.Tensor, C: torch.Tensor,
                state: torch.Tensor, chunk: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Mamba2's scan of one sequence, without the ``D`` skip: ``(y [T, H, P], final state [H, P, N])``.

    Args:
        x: float32 ``[T, H, P]``. delta: ``[T, H]``, the time steps after softplus and clamp.
        A: ``[H]``. B, C: ``[T, H, N]`` (groups already repeated to heads).
        state: ``[H, P, N]``, the state before the first token.
        chunk: tokens per chunk.
    """
    tokens = x.shape[0]
    x_dt = _pad_chunks(x * delta[..., None], chunk)  # [c, L, H, P]
    Bc, Cc = _pad_chunks(B, chunk), _pad_chunks(C, chunk)  # [c, L, H, N]
    log_decay = _pad_chunks(delta * A, chunk).permute(2, 0, 1)  # [H, c, L]
    cumulative = log_decay.cumsum(dim=-1)
    within = torch.einsum("clhn,cshn->hcls", Cc, Bc) * _decay_matrix(cumulative)
    y = torch.einsum("hcls,cshp->clhp", within, x_dt)
    to_end = (cumulative[..., -1:] - cumulative).exp()  # [H, c, L]
    contributions = torch.einsum("cshn,hcs,cshp->chpn", Bc, to_end, x_dt)
    chunk_decay = cumulative[..., -1].exp()  # [H, c]
    starts = []
    for i in range(x_dt.shape[0]):
        starts.append(state)
        state = state * chunk_decay[:, i, None, None] + contributions[i]
    y = y + torch.einsum("clhn,chpn,hcl->clhp", Cc, torch.stack(starts), cumulative.exp())
    return y.reshape(-1, *x.shape[1:])[:tokens], state


def gated_delta_chunked(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor, beta: torch.Tensor,
                        state: torch.Tensor, scale: float, chunk: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The gated delta rule over one sequence: ``(o [T, H, V], final state [H, K, V])``.

    Within a chunk the writes of its tokens interact (each corrects what the earlier ones wrote), a
    unit lower-triangular system solved once per chunk (the WY form): ``u`` are the corrected values
    and ``w`` how much each token reads of the chunk's starting state.

    Args:
        q, k: float32 ``[T, H, K]`` (key heads already repeated to the value heads).
        v: ``[T, H, V]``. g: ``[T, H]``, the log decays. beta: ``[T, H]``.
        state: ``[H, K, V]``, the state before the first token.
        scale: the factor on the queries.
        chunk: tokens per chunk.
    """
    tokens = v.shape[0]
    qc, kc, vc = (_pad_chunks(t, chunk).permute(2, 0, 1, 3) for t in (q * scale, k, v))  # [H, c, L, *]
    bc = _pad_chunks(beta, chunk).permute(2, 0, 1)[..., None]  # [H, c, L, 1]
    cumulative = _pad_chunks(g, chunk).permute(2, 0, 1).cumsum(dim=-1)  # [H, c, L]
    k_beta = kc * bc
    system = (k_beta @ kc.transpose(-1, -2)) * _decay_matrix(cumulative, strict=True)
    u = torch.linalg.solve_triangular(system, vc * bc, upper=False, unitriangular=True)  # diagonal taken as 1
    w = torch.linalg.solve_triangular(system, k_beta * cumulative.exp()[..., None], upper=False, unitriangular=True)
    reads = (qc @ kc.transpose(-1, -2)) * _decay_matrix(cumulative)
    q_decayed = qc * cumulative.exp()[..., None]
    k_to_end = kc * (cumulative[..., -1:] - cumulative).exp()[..., None]
    chunk_decay = cumulative[..., -1].exp()[..., None, None]  # [H, c, 1, 1]
    out = torch.empty_like(vc)
    for i in range(vc.shape[1]):
        corrected = u[:, i] - w[:, i] @ state
        out[:, i] = q_decayed[:, i] @ state + reads[:, i] @ corrected
        state = state * chunk_decay[:, i] + k_to_end[:, i].transpose(-1, -2) @ corrected
    return out.permute(1, 2, 0, 3).reshape(-1, *v.shape[1:])[:tokens], state
