"""Counting continuations into a frequency tree and choosing the draft from it."""

from __future__ import annotations

from collections.abc import Sequence

from pyagent_core.interfaces.proposer import ROOT, DraftTree


class ContinuationTree:
    """A trie of the continuations of a match's occurrences, with how many pass through each node.

    Nodes are numbered in insertion order, so a parent always has a smaller number than its
    children; continuations are inserted most recent occurrence first, which breaks count ties in
    favour of recent text.
    """

    def __init__(self) -> None:
        self.tokens: list[int] = []
        self.parents: list[int] = []
        self.counts: list[int] = []
        self._index: dict[tuple[int, int], int] = {}
        self.num_paths = 0

    def add(self, text: Sequence[int], start: int, length: int) -> None:
        """Count ``text[start:start + length]`` (cut at the first negative id) as one continuation."""
        self.num_paths += 1
        node = ROOT
        for token in text[start:start + length]:
            if token < 0:
                break
            key = (node, token)
            child = self._index.get(key)
            if child is None:
                child = self._index[key] = len(self.tokens)
                self.tokens.append(token)
                self.parents.append(node)
                self.counts.append(0)
            self.counts[child] += 1
            node = child

    def _depths(self) -> list[int]:
        depths: list[int] = []
        for parent in self.parents:
            depths.append(1 if parent == ROOT else depths[parent] + 1)
        return depths

    def best_tree(self, budget: int, min_prob: float) -> DraftTree | None:
        """The ``budget`` nodes reached by the most occurrences (at least ``min_prob`` of them).

        A parent's count is never below its child's and its depth is smaller, so ranking by
        (count descending, depth, number) keeps every chosen node's parent chosen too.
        """
        threshold = min_prob * self.num_paths
        depths = self._depths()
        ranked = sorted((i for i, c in enumerate(self.counts) if c >= threshold and c > 0),
                        key=lambda i: (-self.counts[i], depths[i], i))[:budget]
        return self._draft(sorted(ranked))

    def best_chain(self, budget: int, min_prob: float) -> DraftTree | None:
        """Follow the most frequent child from the root, while it is reached often enough."""
        children: dict[int, list[int]] = {}
        for i, parent in enumerate(self.parents):
            children.setdefault(parent, []).append(i)
        chosen: list[int] = []
        node = ROOT
        while len(chosen) < budget and node in children:
            node = max(children[node], key=lambda i: (self.counts[i], -i))
            if self.counts[node] < min_prob * self.num_paths:
                break
            chosen.append(node)
        return self._draft(chosen)

    def _draft(self, nodes: list[int]) -> DraftTree | None:
        """The draft made of ``nodes`` (sorted, closed under parents), scored by reach."""
        if not nodes:
            return None
        position = {node: i for i, node in enumerate(nodes)}
        return DraftTree(
            [self.tokens[n] for n in nodes],
            [ROOT if self.parents[n] == ROOT else position[self.parents[n]] for n in nodes],
            [self.counts[n] / self.num_paths for n in nodes],
        )
