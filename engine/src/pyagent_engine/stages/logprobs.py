"""Stage 6, record logprobs: the records of the step's prompt positions and emitted tokens, for the requests that ask.

Every record the engine makes is made here (:mod:`pyagent_engine.requests.logprobs` says what a
record holds): prompt tokens from the forward's logits, always raw; emitted tokens, in a plain step
and in verification alike, from the row each token was chosen at (:attr:`Selection.rows`) - the
model's logits there with ``logprobs_mode="raw"``, or with ``"processed"`` the row after the grammar
mask and the whole sampler chain, the distribution the token was drawn from.
"""

from __future__ import annotations

import attrs
import torch

from pyagent_engine.requests.logprobs import TokenLogprob
from pyagent_engine.sampling.logprob_scoring import token_logprobs
from pyagent_engine.stages.records import MaskedLogits, Selection, StepLogits


class RecordLogprobs:
    """Scores the rows the step's recorded tokens come from, in one batch per step.

    Args:
        logprobs_mode: the engine's ``logprobs_mode``, ``"raw"`` or ``"processed"``.
    """

    def __init__(self, logprobs_mode: str) -> None:
        self.processed = logprobs_mode == "processed"

    @staticmethod
    def score_prompts(logits: StepLogits) -> None:
        """Add the prompt logprobs of the positions computed this step (the logits at position ``p``
        score prompt token ``p + 1``)."""
        for request, positions, rows in logits.prompt:
            assert request.prompt_logprobs is not None and request.params.prompt_logprobs is not None
            tokens = request.prompt_token_ids[positions.start + 1:positions.stop + 1]
            request.prompt_logprobs.extend(token_logprobs(rows, tokens, [request.params.prompt_logprobs] * len(tokens)))

    def run(self, masked: MaskedLogits, selection: Selection) -> Selection:
        """``selection`` with the record of every token of each request that asks for logprobs."""
        asking = [i for i, request in enumerate(selection.requests) if request.params.logprobs is not None]
        if not asking:
            return selection
        tokens = [token for i in asking for token in selection.tokens[i]]
        ks = [selection.requests[i].params.logprobs or 0 for i in asking for _ in selection.tokens[i]]
        if self.processed and selection.processed is not None:
            rows = torch.stack([row for i in asking for row in selection.processed[i]])
        else:
            source = masked.logits if self.processed or masked.unmasked is None else masked.unmasked
            rows = source.index_select(0, torch.tensor([row for i in asking for row in selection.rows[i]]))
        records = iter(token_logprobs(rows, tokens, ks))
        by_request: list[tuple[TokenLogprob, ...] | None] = [None] * len(selection.requests)
        for i in asking:
            by_request[i] = tuple(next(records) for _ in selection.tokens[i])
        return attrs.evolve(selection, logprobs=tuple(by_request))
