"""The ``gumbel`` selector: Gumbel-max over counter-based noise, one stream per request."""

from __future__ import annotations

import numbers
import random
from collections.abc import Mapping
from typing import Any

import attrs
import torch

from pyagent_core.interfaces.sampler import AddedRequest, BatchUpdate, SamplerContext, TokenSelector
from pyagent_kernels.gumbel import GumbelStreams, to_signed64
from pyagent_kernels.sampling import KeptTokens

OWNER = "gumbel sampler"
MAX_SEED = 2**64 - 1


def _check_seed(value: Any, where: str) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, numbers.Integral)
                              or not 0 <= value <= MAX_SEED):
        raise ValueError(f"{where}: seed={value!r} is invalid; seed must be an integer in [0, 2**64 - 1] or None")


@attrs.define
class GumbelRow:
    """A request's seed and how many tokens it has drawn (the step of its next draw; while the batch
    is unchanged the selector counts steps in a tensor and writes them back on the next change)."""

    params: Mapping[str, Any]
    seed: int
    step: int = 0


class GumbelSelector(TokenSelector):
    """Chooses ``argmax_j logits[j] + g(seed, step, j)`` per row (see ``pyagent_kernels.gumbel``).

    A seeded request's draws depend only on its seed, its step count and its logits. Requests
    without a seed get one from the engine-level generator (seeded from the ``seed`` option) when
    they join the batch.
    """

    def __init__(self, options: Mapping[str, Any], context: SamplerContext) -> None:
        super().__init__(options, context)
        _check_seed(self.options.get("seed"), f"option of the {OWNER}")
        self.backend = str(self.options.get("backend") or "auto")
        seed = self.options.get("seed")
        self._engine = random.Random(seed) if seed is not None else random.Random()
        self._streams: GumbelStreams | None = None  # the rows' seeds and steps while the batch is unchanged

    def row_state(self, request: AddedRequest) -> GumbelRow:
        """Validate the request's ``seed``; unseeded requests draw one from the engine's generator."""
        seed = request.params.get("seed")
        _check_seed(seed, request.where)
        return GumbelRow(params=request.params, seed=self._engine.getrandbits(64) if seed is None else int(seed))

    def update_state(self, update: BatchUpdate | None) -> None:
        """Apply the batch changes; the per-row seed and step tensors are rebuilt when anything changed."""
        if update is not None and self._streams is not None:
            for row, step in enumerate(self._streams.steps.tolist()):  # steps advanced since the last rebuild
                self.rows[row].step = step
            self._streams = None
        super().update_state(update)

    def select(self, logits: torch.Tensor, kept: KeptTokens | None = None) -> torch.Tensor:
        """One ``int64`` token id per row; each row's step advances by one.

        ``kept``: the tokens the fused mask recorded for these logits (see
        ``pyagent_sampler_host.fused_mask.apply_processors``); rows then cost O(kept tokens) instead
        of a scan of the vocabulary, with the same choice.
        """
        rows = len(self.rows)
        if logits.ndim != 2 or logits.shape[0] != rows or logits.shape[1] != self.vocab_size:
            raise ValueError(
                f"{OWNER}: logits have shape {tuple(logits.shape)} but the batch holds {rows} requests "
                f"over vocab_size={self.vocab_size}; pass every BatchUpdate to update_state first"
            )
        if self._streams is None:
            self._streams = GumbelStreams(
                torch.tensor([to_signed64(self.rows[r].seed) for r in range(rows)], dtype=torch.int64),
                torch.tensor([to_signed64(self.rows[r].step) for r in range(rows)], dtype=torch.int64),
            )
        if logits.dtype == torch.float32 and logits.is_cpu and logits.is_contiguous():
            return self._streams.sample(logits, kept=kept, backend=self.backend)  # type: ignore[arg-type]
        tokens = self._streams.sample(logits.float().cpu().contiguous(), backend=self.backend)  # type: ignore[arg-type]
        return tokens.to(logits.device)
