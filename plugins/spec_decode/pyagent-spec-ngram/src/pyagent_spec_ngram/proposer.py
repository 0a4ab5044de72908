"""Prompt-lookup proposer: n-gram matching over each request's prompt and output."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pyagent_kernels.spec_decode import TokenHistories, suffix_match

from pyagent_core.errors import OptionError
from pyagent_core.interfaces.proposer import DraftTree, Proposer, ProposerRequest


class NgramProposer(Proposer):
    """Drafts the continuation of the most recent earlier occurrence of the longest matching n-gram.

    Options: ``min_n``, ``max_n`` (n-gram sizes compared), ``max_tokens`` (draft length cap) and
    ``backend`` (``auto`` / ``c`` / ``python`` matching). Drafts are chains; each node's score is
    1.0 (the proposer has no probability of its own; the engine calibrates by acceptance).
    """

    def __init__(self, options: Mapping[str, Any]) -> None:
        super().__init__({"min_n": 2, "max_n": 8, "max_tokens": 8, "backend": "auto", **options})
        if self.options["max_n"] < self.options["min_n"]:
            raise OptionError(f"ngram: max_n ({self.options['max_n']}) must be >= min_n ({self.options['min_n']})")
        self.histories = TokenHistories()

    def propose(self, requests: Sequence[ProposerRequest], max_tokens: int) -> list[DraftTree | None]:
        """One chain per request from its own history, or ``None`` when nothing matches."""
        limit = min(max_tokens, self.options["max_tokens"])
        return [self._propose_one(request, limit) if limit > 0 else None for request in requests]

    def _propose_one(self, request: ProposerRequest, limit: int) -> DraftTree | None:
        history = self.histories.sync(request.request_id, request.prompt_token_ids, request.output_token_ids)
        _, hits = suffix_match(history, history, min_len=self.options["min_n"], max_len=self.options["max_n"],
                               max_hits=1, backend=self.options["backend"])
        if not hits:
            return None
        start = hits[0]
        return DraftTree.chain(history[start:start + limit])

    def on_finished(self, request_id: str) -> None:
        """Drop the request's history buffer."""
        self.histories.drop(request_id)
