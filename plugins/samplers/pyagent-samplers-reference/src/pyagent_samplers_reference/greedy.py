"""Greedy selection: the most likely token of each row."""

from __future__ import annotations

import torch

from pyagent_core.interfaces.sampler import TokenSelector
from pyagent_sampler_base.logits_checks import check_logits, check_selectable


class GreedySelector(TokenSelector):
    """Chooses each row's largest logit; among equal logits, the lowest token id."""

    def select(self, logits: torch.Tensor) -> torch.Tensor:
        """Return the ``int64`` argmax of every row (``torch.max`` returns the first maximal index)."""
        check_logits(logits, self.vocab_size, "greedy sampler")
        row_max, token_ids = logits.max(dim=1)
        check_selectable(row_max, "greedy sampler")
        return token_ids
