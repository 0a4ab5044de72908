"""Base of the processors that ban tokens, and the rule for a row they would empty."""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Mapping
from typing import Any

import torch

from pyagent_sampler_base.multi_param import MultiParamProcessor, ParamRow
from pyagent_sampler_base.token_params import check_in_vocab


class BanProcessor(MultiParamProcessor):
    """Sets the logits of banned tokens to ``-inf``.

    A ban that would remove every token still allowed in a row is not applied to that row for this
    step: the row comes out unchanged, so the batch always has a token to choose (transformers would
    leave the row all ``-inf`` and fail at sampling time).
    """

    token_id_params: tuple[str, ...] = ()

    def is_argmax_invariant(self) -> bool:
        """False: the most likely token may be banned."""
        return False

    def check_values(self, values: Mapping[str, Any], where: str) -> None:
        """Token ids of the parameters in :attr:`token_id_params` must lie in the vocabulary."""
        for name in self.token_id_params:
            value = values[name] or ()
            ids = [t for item in value for t in (item if isinstance(item, list | tuple) else (item,))]
            check_in_vocab(name, ids, self.vocab_size, where)

    def process(self, logits: torch.Tensor, rows: list[int]) -> torch.Tensor:
        """Mask the banned tokens of each row, except in rows the ban would empty."""
        banned = torch.zeros(logits.shape, dtype=torch.bool)
        for i, row in enumerate(rows):
            tokens = self.banned_tokens(self.rows[row])
            if tokens:
                banned[i, list(tokens)] = True
        banned = banned.to(logits.device)
        empties = ~(torch.isfinite(logits) & ~banned).any(dim=1, keepdim=True)
        return logits.masked_fill(banned & ~empties, float("-inf"))

    @abstractmethod
    def banned_tokens(self, row: ParamRow) -> set[int]:
        """The token ids banned in ``row`` at this step."""
