"""Draft trees as the engine handles them: validity, sub-trees, the attention tree mask, node positions
and the walk that verification takes through a draft."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from pyagent_core.interfaces.proposer import ROOT, DraftTree


def tree_error(draft: DraftTree) -> str | None:
    """Why ``draft`` is not a valid draft tree (a :meth:`DraftTree.trusted` one skipped the checks), or None."""
    try:
        draft.check()
    except ValueError as error:
        return str(error)
    return None


def subtree(draft: DraftTree, nodes: Sequence[int]) -> DraftTree | None:
    """The draft made of ``nodes`` (ascending, closed under parents), or ``None`` when empty."""
    if not nodes:
        return None
    if len(nodes) == len(draft):
        return draft
    where = {node: i for i, node in enumerate(nodes)}
    return DraftTree([draft.token_ids[i] for i in nodes],
                     [ROOT if draft.parents[i] == ROOT else where[draft.parents[i]] for i in nodes],
                     None if draft.scores is None else [draft.scores[i] for i in nodes])


def _tree_mask_rows(draft: DraftTree) -> torch.Tensor:
    """``bool [1 + n, 1 + n]``: the last real token sees itself; node ``i`` sees it, its ancestors, itself."""
    n = len(draft)
    mask = torch.zeros((n + 1, n + 1), dtype=torch.bool)
    mask[:, 0] = True
    for i in range(n):
        mask[i + 1, [1 + j for j in draft.path(i)]] = True
    return mask


def tree_mask(chunks: Sequence[Any], max_query_len: int) -> torch.Tensor | None:
    """The batch's ``tree_mask`` (see :class:`~pyagent_core.interfaces.attention.AttentionMetadata`),
    or ``None`` when every chunk is causal (no draft, or chain drafts only)."""
    drafts = [c.request.draft for c in chunks]
    if all(d is None or d.is_chain() for d in drafts):
        return None
    blocks = []
    for chunk, draft in zip(chunks, drafts, strict=True):
        if draft is not None:
            block = _tree_mask_rows(draft)
        else:
            block = torch.ones((chunk.num_tokens, chunk.num_tokens), dtype=torch.bool).tril_()
        blocks.append(torch.nn.functional.pad(block, (0, max_query_len - block.shape[1])))
    return torch.cat(blocks)


def draft_positions(start: int, draft: DraftTree) -> list[int]:
    """Positions of the draft nodes of a request whose last real token sits at ``start``."""
    return [start + depth for depth in draft.node_depths()]


def node_child(draft: DraftTree | None, node: int, token: int) -> int | None:
    """The child of ``node`` (``ROOT``: the root) in ``draft`` whose token is ``token``, or ``None``
    (no draft, no such child): the next step of a walk through a draft."""
    if draft is None:
        return None
    for child in draft.children(node):
        if draft.token_ids[child] == token:
            return child
    return None


def walk(draft: DraftTree | None, chosen: Sequence[int], offset: int) -> tuple[list[int], list[int]]:
    """Walk ``draft`` with the token chosen at each of its rows (``chosen[offset]``: after the last
    real token, ``chosen[offset + 1 + i]``: after node ``i``); return the emitted tokens and the
    accepted nodes, in depth order."""
    emitted, accepted, node = [chosen[offset]], [], ROOT
    while (child := node_child(draft, node, emitted[-1])) is not None:
        accepted.append(child)
        emitted.append(chosen[offset + 1 + child])
        node = child
    return emitted, accepted
