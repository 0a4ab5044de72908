"""Stage 4, logits processing and masks: the grammar bitmask on the rows of constrained requests.

The sampler chain's processors run inside the select stage, on the rows of each depth of a draft
walk, because a history-aware processor (penalties, DRY) must see the tokens accepted at the depths
before. The grammar mask needs no history within a step: constrained requests are never drafted
for, so the only row of theirs is masked here, once.
"""

from __future__ import annotations

from collections.abc import Sequence

from pyagent_engine.requests.request import Request
from pyagent_engine.stages.records import MaskedLogits, StepLogits
from pyagent_engine.structured.runtime import StructuredOutputs


class MaskLogits:
    """Applies each constrained request's grammar bitmask to its logits row.

    Args:
        structured: structured output (each request's matcher fills its bitmask row).
        logprobs_mode: the engine's ``logprobs_mode``: with ``"raw"``, a constrained request that asks
            for logprobs needs its row as it was before the mask, so the rows are copied first.
    """

    def __init__(self, structured: StructuredOutputs, logprobs_mode: str) -> None:
        self.structured = structured
        self.raw = logprobs_mode == "raw"

    def run(self, logits: StepLogits, requests: Sequence[Request]) -> MaskedLogits:
        """The rows of ``requests`` (all of ``logits.rows.requests`` or some, in that order) as sampling sees them.

        For the whole batch the forward's logits are masked in place; for some requests (a failure
        being isolated) their rows are copied first, so the batch's rows stay as they were.
        """
        rows, taken = logits.rows.subset(requests)
        table = logits.logits if taken is None else logits.logits[taken]
        unmasked = None
        if self.raw and any(r.logprobs is not None and self.structured.params_of(r) is not None for r in requests):
            unmasked = table.clone()
        self.structured.apply_masks(rows.requests, table, rows.offsets)
        return MaskedLogits(rows, table, unmasked)
