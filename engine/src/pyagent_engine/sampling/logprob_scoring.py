"""Computing :class:`~pyagent_engine.requests.logprobs.TokenLogprob` records from logits, batched per step."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from pyagent_engine.requests.logprobs import TokenLogprob

_ROWS_AT_ONCE = 256  # log-softmax this many rows at a time: a long prompt's logits stay in slices


def token_logprobs(logits: torch.Tensor, token_ids: Sequence[int], ks: Sequence[int]) -> list[TokenLogprob]:
    """The record of ``token_ids[i]`` under the log-softmax of ``logits[i]``, with ``ks[i]`` alternatives.

    ``logits``: ``[len(token_ids), vocab]``, any floating dtype (scored in float32).
    """
    records: list[TokenLogprob] = []
    for start in range(0, len(token_ids), _ROWS_AT_ONCE):
        stop = start + _ROWS_AT_ONCE
        records += _score(logits[start:stop], token_ids[start:stop], ks[start:stop])
    return records


def _score(logits: torch.Tensor, token_ids: Sequence[int], ks: Sequence[int]) -> list[TokenLogprob]:
    logprobs = torch.log_softmax(logits.float(), dim=-1)
    chosen = logprobs.gather(1, torch.tensor(token_ids, dtype=torch.long).unsqueeze(1))
    ranks = ((logprobs > chosen).sum(dim=1) + 1).tolist()
    vocab = logprobs.shape[1]
    widest = min(max(ks, default=0), vocab)
    values, indices = logprobs.topk(widest, dim=1) if widest else (None, None)
    records = []
    for row, (token, wanted) in enumerate(zip(token_ids, ks, strict=True)):
        k = min(wanted, vocab)  # a vocabulary smaller than k has only so many alternatives
        top: tuple[tuple[int, float], ...] = ()
        if k and values is not None and indices is not None:
            top = _top(logprobs[row], values[row, :k], indices[row, :k], k)
        records.append(TokenLogprob(int(token), float(chosen[row, 0]), int(ranks[row]), top))
    return records


def _top(row: torch.Tensor, values: torch.Tensor, indices: torch.Tensor, k: int) -> tuple[tuple[int, float], ...]:
    """The ``k`` best of ``row`` by (descending value, ascending id), given a ``topk`` of it (whose
    order among equal values is unspecified, and which may leave out ids tied with its last value)."""
    candidates = row >= values[-1]
    if int(candidates.sum()) > k:  # ids tied with the last value outside the topk: a stable sort of
        ids = torch.nonzero(candidates).squeeze(1)  # every candidate, ids ascending, keeps ties by id
        order = torch.sort(row[ids], descending=True, stable=True).indices[:k]
        return tuple(zip(ids[order].tolist(), row[ids[order]].tolist(), strict=True))
    pairs = zip(indices.tolist(), values.tolist(), strict=True)
    return tuple(sorted(pairs, key=lambda pair: (-pair[1], pair[0])))
