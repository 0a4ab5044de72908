"""Prompt-lookup proposer: n-gram matching over each request's prompt and output."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pyagent_core.errors import OptionError
from pyagent_core.interfaces.proposer import DraftTree, Proposer, ProposerContext, ProposerRequest
from pyagent_kernels.spec_decode import Drafter, draft_params


class NgramProposer(Proposer):
    """Drafts the continuation of the most recent earlier occurrence of the longest matching n-gram.

    Options: ``min_n``, ``max_n`` (n-gram sizes compared), ``max_tokens`` (draft length cap) and
    ``backend`` (``auto`` / ``c`` / ``python`` matching). Drafts are chains; each node's score is
    the estimated probability that it is accepted, from the length of the match it extends and the
    acceptance seen so far. Each request's history is an index appended to step by step (see
    :class:`pyagent_kernels.spec_decode.Drafter`).
    """

    def __init__(self, options: Mapping[str, Any], context: ProposerContext) -> None:
        super().__init__(options, context)
        o = self.options
        if o["max_n"] < o["min_n"]:
            raise OptionError(f"ngram: max_n ({o['max_n']}) must be >= min_n ({o['min_n']})")
        self.drafter = Drafter(draft_params(min_len=o["min_n"], max_len=o["max_n"], max_hits=1), backend=o["backend"],
                               make_draft=DraftTree.trusted)

    def propose(self, requests: Sequence[ProposerRequest], max_tokens: int) -> list[DraftTree | None]:
        """One chain per request from its own history, or ``None`` when nothing matches."""
        limit = min(max_tokens, self.options["max_tokens"])
        if limit <= 0:
            return [None] * len(requests)
        return self.drafter.propose(requests, limit)

    def on_finished(self, request_id: str) -> None:
        """Drop the request's history."""
        self.drafter.finish(request_id)
