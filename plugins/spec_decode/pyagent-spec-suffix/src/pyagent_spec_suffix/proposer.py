"""SuffixDecoding-style proposer: draft trees from where the context's end occurred before.

Two sources are searched every step: the request's own prompt and output, and a global store of
earlier requests' outputs (:class:`~pyagent_spec_suffix.store.OutputStore`). The source with the
longer match wins (the request's own history on a tie); the continuations of up to ``max_hits`` of
its most recent occurrences are counted into a :class:`~pyagent_spec_suffix.tree.ContinuationTree`
and the draft is its best-reached part, sized by the match length.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Mapping, Sequence
from typing import Any

from pyagent_kernels.spec_decode import TokenHistories, suffix_match

from pyagent_core.errors import OptionError
from pyagent_core.interfaces.proposer import DraftTree, Proposer, ProposerRequest
from pyagent_spec_suffix.store import OutputStore
from pyagent_spec_suffix.tree import ContinuationTree

DEFAULTS: dict[str, Any] = {
    "max_depth": 32, "min_match": 2, "max_tokens": 16, "max_hits": 16, "spec_factor": 1.0,
    "min_token_prob": 0.1, "tree": True, "global_max_tokens": 4096, "backend": "auto",
}


class SuffixProposer(Proposer):
    """Frequency-scored draft trees (or chains, with ``tree=False``); options as in the plugin spec."""

    def __init__(self, options: Mapping[str, Any]) -> None:
        super().__init__({**DEFAULTS, **options})
        if self.options["max_depth"] < self.options["min_match"]:
            raise OptionError(f"suffix: max_depth ({self.options['max_depth']}) must be >= "
                              f"min_match ({self.options['min_match']})")
        self.histories = TokenHistories()
        self.prompt_lengths: dict[str, int] = {}
        self.store = OutputStore(self.options["global_max_tokens"])

    def propose(self, requests: Sequence[ProposerRequest], max_tokens: int) -> list[DraftTree | None]:
        """One draft per request, or ``None`` where neither source matches."""
        limit = min(max_tokens, self.options["max_tokens"])
        return [self._propose_one(request, limit) if limit > 0 else None for request in requests]

    def _match(self, text: array, history: array) -> tuple[int, list[int]]:
        o = self.options
        return suffix_match(text, history, min_len=o["min_match"], max_len=o["max_depth"],
                            max_hits=o["max_hits"], backend=o["backend"])

    def _propose_one(self, request: ProposerRequest, limit: int) -> DraftTree | None:
        history = self.histories.sync(request.request_id, request.prompt_token_ids, request.output_token_ids)
        self.prompt_lengths[request.request_id] = len(request.prompt_token_ids)
        length, hits = self._match(history, history)
        text = history
        if len(self.store):
            global_length, global_hits = self._match(self.store.buffer, history)
            if global_length > length:
                length, hits, text = global_length, global_hits, self.store.buffer
        if not hits:
            return None
        budget = min(limit, math.ceil(self.options["spec_factor"] * length))
        if budget <= 0:
            return None
        tree = ContinuationTree()
        for end in hits:
            tree.add(text, end, budget)
        min_prob = self.options["min_token_prob"]
        return tree.best_tree(budget, min_prob) if self.options["tree"] else tree.best_chain(budget, min_prob)

    def on_finished(self, request_id: str) -> None:
        """Move the request's output into the global store and drop its per-request state."""
        history = self.histories.drop(request_id)
        prompt_length = self.prompt_lengths.pop(request_id, None)
        if history is not None and prompt_length is not None:
            self.store.add(history[prompt_length:])
