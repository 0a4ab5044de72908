"""Stage 5, select tokens: the sampler host chooses each request's tokens, in a plain step and in verification alike.

A request without a draft has one logits row and emits the token the chain chooses from it. A
request with a draft has ``1 + len(draft)`` rows and its draft is walked depth by depth: at each
depth the row after the accepted path so far goes through the same chain as a plain step, and the
chosen token is compared with the children of the current node. Equal to one of them, that child is
accepted and the walk goes on; otherwise the chosen token ends the walk (the correction); at a
leaf, the token chosen there is the bonus. A plain step is the walk's first depth, with every
request ending there.

For greedy rows this is exact-match acceptance. For sampled rows it is rejection sampling with a
point-mass draft distribution q (every proposer here is deterministic): accepting draft token x with
probability min(1, p(x)/q(x)) = p(x) and otherwise drawing from the residual max(p - q, 0), which is
p without x, renormalised, gives token y with probability p(y) for every y; drawing y from p and
accepting when y == x gives the same joint distribution of (accepted, token) - so each emitted token
is distributed exactly as without speculation, and every selector, seed and history-aware processor
of the chain applies unchanged (accepted tokens are appended to the output before the next depth is
sampled, and taken off again before the step appends them for good). The tree case is the same
argument with several candidates.

The host is :mod:`pyagent_sampler_host`'s (built by :func:`pyagent_engine.sampling.host.sampler_host`):
it runs the chain's processors and its 'select' stage. When the chain is a plain argmax for the batch
(:meth:`SamplerHost.greedy_rows <pyagent_sampler_host.host.SamplerHost.greedy_rows>`: every request
greedy, no processor that would change a row), every row's token is chosen in one call and the walk
reads them.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from pyagent_core.interfaces.proposer import ROOT
from pyagent_engine.requests.request import Request
from pyagent_engine.spec.tree import node_child, walk
from pyagent_engine.stages.records import MaskedLogits, Selection
from pyagent_sampler_host.host import SamplerHost


class SelectTokens:
    """Chooses the tokens each request emits.

    Args:
        logprobs_mode: the engine's ``logprobs_mode``; with ``"processed"``, when a request asks for
            logprobs, the whole chain runs (also for greedy rows) and the processed rows the tokens
            were drawn from are kept for the record-logprobs stage.
    """

    def __init__(self, logprobs_mode: str) -> None:
        self.processed = logprobs_mode == "processed"

    def run(self, masked: MaskedLogits, host: SamplerHost[Request]) -> Selection:
        """The :class:`Selection` of ``masked``'s requests, chosen with ``host``."""
        requests, offsets, logits = masked.rows.requests, masked.rows.offsets, masked.logits
        keep = self.processed and any(r.logprobs is not None for r in requests)
        chosen = host.greedy_rows(requests, logits, keep)
        if chosen is None:
            return self._walk(requests, offsets, logits, host, keep)
        walks = [walk(r.draft, chosen, offset) for r, offset in zip(requests, offsets, strict=True)]
        return Selection(
            requests=tuple(requests), tokens=tuple(tuple(tokens) for tokens, _ in walks),
            accepted=tuple(tuple(accepted) for _, accepted in walks),
            rows=tuple(tuple(offset + (0 if depth == 0 else 1 + accepted[depth - 1]) for depth in range(len(tokens)))
                       for offset, (tokens, accepted) in zip(offsets, walks, strict=True)),
        )

    @staticmethod
    def _walk(requests: Sequence[Request], offsets: Sequence[int], logits: torch.Tensor,
              host: SamplerHost[Request], keep: bool) -> Selection:
        """Every request's draft walked depth by depth, the host sampling every request at each depth."""
        count = len(requests)
        current, active = [ROOT] * count, [True] * count
        tokens: list[list[int]] = [[] for _ in requests]
        accepted: list[list[int]] = [[] for _ in requests]
        rows: list[list[int]] = [[] for _ in requests]
        processed: list[list[torch.Tensor]] = [[] for _ in requests]
        lengths = [len(r.output_token_ids) for r in requests]
        try:
            while any(active):
                at = [offsets[i] + (1 + current[i] if active[i] and current[i] != ROOT else 0) for i in range(count)]
                batch = logits if at == list(range(len(logits))) else logits.index_select(0, torch.tensor(at))
                if keep:
                    chosen, distributions = host.sample_processed(requests, batch)
                else:
                    chosen = host.sample(requests, batch)
                for i, request in enumerate(requests):
                    if not active[i]:
                        continue
                    tokens[i].append(chosen[i])
                    rows[i].append(at[i])
                    if keep and request.logprobs is not None:
                        processed[i].append(distributions[i])
                    request.output_token_ids.append(chosen[i])  # the next depth's processors see it
                    child = node_child(request.draft, current[i], chosen[i])
                    if child is None:
                        active[i] = False
                    else:
                        current[i] = child
                        accepted[i].append(child)
        finally:
            for request, length in zip(requests, lengths, strict=True):
                del request.output_token_ids[length:]
        return Selection(
            requests=tuple(requests), tokens=tuple(map(tuple, tokens)), accepted=tuple(map(tuple, accepted)),
            rows=tuple(map(tuple, rows)), processed=tuple(map(tuple, processed)) if keep else None,
        )
