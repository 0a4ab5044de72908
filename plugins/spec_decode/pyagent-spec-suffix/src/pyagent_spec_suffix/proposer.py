"""SuffixDecoding-style proposer: draft trees from where the context's end occurred before.

Two sources are searched every step: the request's own prompt and output (a history index appended
to step by step), and a bounded store of earlier requests' outputs (oldest evicted first). The
source with the longer match wins (the request's own history on a tie); the continuations of up to
``max_hits`` of its most recent occurrences are counted into a trie, whose nodes are scored with
the probability that the target accepts them (branch frequency times the acceptance rate learned
for the match length the node extends), and the draft is its best-scored part, at most
``spec_factor`` x the match length. Indexes, drafting and calibration run in C
(:class:`pyagent_kernels.spec_decode.Drafter`), with an identical Python fallback.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pyagent_core.errors import OptionError
from pyagent_core.interfaces.proposer import DraftTree, Proposer, ProposerContext, ProposerRequest
from pyagent_kernels.spec_decode import Drafter, draft_params


class SuffixProposer(Proposer):
    """Scored draft trees (or chains, with ``tree=False``); options as in the plugin spec."""

    def __init__(self, options: Mapping[str, Any], context: ProposerContext) -> None:
        super().__init__(options, context)
        o = self.options
        if o["max_depth"] < o["min_match"]:
            raise OptionError(f"suffix: max_depth ({o['max_depth']}) must be >= min_match ({o['min_match']})")
        self.drafter = Drafter(draft_params(min_len=o["min_match"], max_len=o["max_depth"], max_hits=o["max_hits"],
                                            spec_factor=o["spec_factor"], min_prob=o["min_token_prob"],
                                            tree=o["tree"], cap_by_match=True),
                               store_capacity=o["global_max_tokens"], backend=o["backend"],
                               make_draft=DraftTree.trusted)

    def propose(self, requests: Sequence[ProposerRequest], max_tokens: int) -> list[DraftTree | None]:
        """One draft per request, or ``None`` where neither source matches."""
        limit = min(max_tokens, self.options["max_tokens"])
        if limit <= 0:
            return [None] * len(requests)
        return self.drafter.propose(requests, limit)

    def on_finished(self, request_id: str) -> None:
        """Move the request's output into the global store and drop its history."""
        self.drafter.finish(request_id)
