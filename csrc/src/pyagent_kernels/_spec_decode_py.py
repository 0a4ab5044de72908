"""Pure-Python token indexes and drafting: the fallback of :mod:`pyagent_kernels.spec_decode`.

Gives the C kernels' results (``kernels/spec_decode/*.c``) by following their definitions
directly: matching is a backward scan of the whole text (the C index visits the same end positions
in the same order, only faster), and drafting builds the same insertion-numbered trie, computes
the same scores with the same floating-point operations in the same order, and applies the same
ranking and tie-breaks.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

SEPARATOR = -1
"""Ends every sequence of a store; never matches, so no match or continuation spans two sequences."""
ROOT = -1
NUM_BUCKETS = 16
"""Calibration buckets of extended match lengths (``PAK_DRAFT_BUCKETS``)."""
_BUCKET_UPPER = (10, 12, 16, 24, 32, 48, 64)


def length_bucket(length: int) -> int:
    """Calibration bucket of an extended match length (``pyagent/spec_decode.h``)."""
    if length <= 8:
        return max(length, 1) - 1
    for b, upper in enumerate(_BUCKET_UPPER):
        if length <= upper:
            return 8 + b
    return NUM_BUCKETS - 1


class Calibration:
    """Acceptance counts per bucket (``pak_draft_calibration``), starting from prior pseudo-counts."""

    def __init__(self, accepted: Sequence[float], tried: Sequence[float]) -> None:
        self.accepted = list(accepted)
        self.tried = list(tried)


class DraftParams(NamedTuple):
    """How drafts are built (``pyagent/spec_decode.h``); see :func:`~pyagent_kernels.spec_decode.draft_params`."""

    min_len: int
    max_len: int
    max_hits: int
    spec_factor: float
    min_prob: float
    tree: bool
    cap_by_match: bool


class Draft(NamedTuple):
    """One request's draft: node tokens, parents (-1: the root) and scores (the estimated
    probability that the target accepts the node)."""

    tokens: tuple[int, ...]
    parents: tuple[int, ...]
    scores: tuple[float, ...]


MakeDraft = Callable[[tuple[int, ...], tuple[int, ...], tuple[float, ...]], Any]
"""What a drafter builds each draft with, from its tokens, parents and scores (default :class:`Draft`)."""


class PyTokenIndex:
    """A history (``capacity == 0``) or a bounded store of sequences, as a plain list of live tokens."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.tokens: list[int] = []
        self._sizes: deque[int] = deque()
        self.draft: list[tuple[int, int, int, float]] = []
        """The last draft's nodes: (token, parent, bucket, branch share)."""
        self.draft_at = 0

    def __len__(self) -> int:
        return len(self.tokens)

    def extend(self, tokens: Sequence[int]) -> None:
        """Append to a history."""
        self.tokens.extend(tokens)

    def add_sequence(self, tokens: Sequence[int]) -> None:
        """Add a sequence and its separator to a store, evicting the oldest sequences to fit."""
        if self.capacity < 2 or not tokens:
            return
        kept = list(tokens[-(self.capacity - 1):])
        size = len(kept) + 1
        drop = 0
        while self._sizes and len(self.tokens) - drop + size > self.capacity:
            drop += self._sizes.popleft()
        del self.tokens[:drop]
        self.tokens.extend(kept)
        self.tokens.append(SEPARATOR)
        self._sizes.append(size)


def match_py(text: Sequence[int], pattern: Sequence[int], min_len: int, max_len: int,
             max_hits: int) -> tuple[int, list[int]]:
    """``(match_len, hits)`` by a backward scan; see :func:`pyagent_kernels.spec_decode.suffix_match`."""
    text_len, pattern_len = len(text), len(pattern)
    if pattern_len < min_len or text_len < 2:
        return 0, []
    cap = min(max_len, pattern_len)
    last = pattern[-1]
    if last < 0:
        return 0, []
    best = min_len - 1
    hits: list[int] = []
    for e in range(text_len - 1, 0, -1):
        if text[e - 1] != last:
            continue
        limit = min(cap, e)
        m = 1
        while m < limit and text[e - 1 - m] == pattern[pattern_len - 1 - m] and text[e - 1 - m] >= 0:
            m += 1
        if m > best:
            best, hits = m, [e]
        elif m == best and hits and len(hits) < max_hits:
            hits.append(e)
    return (best if hits else 0), hits


class _Trie:
    """Continuations counted into a trie (nodes numbered in insertion order), then scored."""

    def __init__(self, text: Sequence[int], hits: Sequence[int], budget: int) -> None:
        self.tokens: list[int] = []
        self.parents: list[int] = []
        self.depths: list[int] = []
        self.counts: list[int] = []
        self.children: dict[int, list[int]] = {}
        self.buckets: list[int] = []
        self.shares: list[float] = []
        self.scores: list[float] = []
        index: dict[tuple[int, int], int] = {}
        for start in hits:
            node = ROOT
            for token in text[start:start + budget]:
                if token < 0:
                    break
                child = index.get((node, token))
                if child is None:
                    child = index[node, token] = len(self.tokens)
                    self.tokens.append(token)
                    self.parents.append(node)
                    self.depths.append(1 if node == ROOT else self.depths[node] + 1)
                    self.counts.append(0)
                    self.children.setdefault(node, []).append(child)
                self.counts[child] += 1
                node = child

    def score(self, num_hits: int, match_len: int, calibration: Calibration) -> None:
        """Each node's bucket, branch share and score (parents first)."""
        for i, parent in enumerate(self.parents):
            bucket = length_bucket(match_len + self.depths[i] - 1)
            share = self.counts[i] / (float(num_hits) if parent == ROOT else float(self.counts[parent]))
            chance = share * (calibration.accepted[bucket] / calibration.tried[bucket])
            self.buckets.append(bucket)
            self.shares.append(share)
            self.scores.append((1.0 if parent == ROOT else self.scores[parent]) * min(chance, 1.0))

    def best_tree(self, budget: int, threshold: float) -> list[int]:
        """The ``budget`` best-scored nodes reaching ``threshold``, in number order."""
        ranked = sorted((i for i, c in enumerate(self.counts) if c >= threshold and c > 0),
                        key=lambda i: (-self.scores[i], self.depths[i], i))
        return sorted(ranked[:budget])

    def best_chain(self, budget: int, threshold: float) -> list[int]:
        """The child with the most continuations from the root down, while it reaches ``threshold``."""
        chosen: list[int] = []
        node = ROOT
        while len(chosen) < budget and node in self.children:
            node = max(self.children[node], key=lambda i: (self.counts[i], -i))
            if self.counts[node] < threshold:
                break
            chosen.append(node)
        return chosen


def calibrate_py(history: PyTokenIndex, calibration: Calibration) -> None:
    """Walk the history's last draft with the tokens appended since; count; forget the draft."""
    node = ROOT
    for token in history.tokens[history.draft_at:] if history.draft else ():
        following = None
        for j, (draft_token, parent, bucket, share) in enumerate(history.draft):
            if parent != node:
                continue
            calibration.tried[bucket] += share
            if draft_token == token:
                following = j
        if following is None:
            break
        calibration.accepted[history.draft[following][2]] += 1.0
        node = following
    history.draft = []


def draft_py(text: Sequence[int], hits: Sequence[int], budget: int, params: DraftParams, match_len: int,
             calibration: Calibration, history: PyTokenIndex, make: MakeDraft) -> Any:
    """The draft from the continuations of ``hits`` in ``text``, remembered by ``history``
    (``None`` when no node qualifies)."""
    trie = _Trie(text, hits, budget)
    trie.score(len(hits), match_len, calibration)
    threshold = params.min_prob * float(len(hits))
    nodes = trie.best_tree(budget, threshold) if params.tree else trie.best_chain(budget, threshold)
    where = {node: k for k, node in enumerate(nodes)}
    parents = tuple(ROOT if trie.parents[n] == ROOT else where[trie.parents[n]] for n in nodes)
    history.draft = [(trie.tokens[n], parent, trie.buckets[n], trie.shares[n])
                     for n, parent in zip(nodes, parents, strict=True)]
    history.draft_at = len(history.tokens)
    if not nodes:
        return None
    return make(tuple(trie.tokens[n] for n in nodes), parents, tuple(trie.scores[n] for n in nodes))


def propose_py(history: PyTokenIndex, tokens: Sequence[int], limit: int, params: DraftParams,
               store: PyTokenIndex | None, calibration: Calibration, make: MakeDraft) -> Any:
    """Append a request's new tokens, calibrate, then draft at most ``limit`` nodes (``None``: no
    draft); see :meth:`pyagent_kernels.spec_decode.Drafter.propose`."""
    history.extend(tokens)
    calibrate_py(history, calibration)
    if limit <= 0:
        return None
    text = history.tokens
    length, hits = match_py(text, text, params.min_len, params.max_len, params.max_hits)
    if store is not None and len(store):
        store_length, store_hits = match_py(store.tokens, text, params.min_len, params.max_len, params.max_hits)
        if store_length > length:
            length, hits, text = store_length, store_hits, store.tokens
    if not hits:
        return None
    budget = min(limit, math.ceil(params.spec_factor * length)) if params.cap_by_match else limit
    if budget <= 0:
        return None
    return draft_py(text, hits, budget, params, length, calibration, history, make)
