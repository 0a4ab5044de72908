"""Multinomial selection: draw each row's token from the softmax of its logits, seeded per request."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs
import torch

from pyagent_core.interfaces.sampler import AddedRequest, BatchUpdate, SamplerContext, TokenSelector
from pyagent_sampler_base.common_params import SEED
from pyagent_sampler_base.logits_checks import check_logits, check_selectable
from pyagent_sampler_base.precision import working_dtype

OWNER = "multinomial sampler"


@attrs.define
class SeededRequest:
    """The row state of a request with a seed: its parameters, seed and generator.

    The generator is created on the logits' device the first time the request is sampled and then
    advances by one draw per step, so a seeded request's tokens depend only on its seed and logits.
    """

    params: Mapping[str, Any]
    seed: int
    generator: torch.Generator | None = None

    def generator_on(self, device: torch.device) -> torch.Generator:
        """The request's generator on ``device``, seeded with the request's seed on first use."""
        if self.generator is None or self.generator.device != device:
            self.generator = torch.Generator(device=device)
            self.generator.manual_seed(self.seed)
        return self.generator


class MultinomialSelector(TokenSelector):
    """Draws each row's token with probability ``softmax(logits)``; ``-inf`` logits are never drawn.

    A request with a ``seed`` parameter draws from its own generator, so its tokens are the same
    whatever row it occupies and whatever else is in the batch; other requests share an engine-level
    generator seeded from the ``seed`` option (from system entropy when the option is unset).

    The draw is the exponential race: the token is ``argmax(p / e)`` with ``e`` i.i.d. ``Exp(1)``,
    which picks token ``i`` with probability ``p[i]``.
    """

    def __init__(self, options: Mapping[str, Any], context: SamplerContext) -> None:
        super().__init__(options, context)
        SEED.validate(self.options.get("seed"), f"option of the {OWNER}")
        self._engine_generators: dict[torch.device, torch.Generator] = {}
        self._row_groups: tuple[list[int], list[int]] | None = None

    def row_state(self, request: AddedRequest) -> SeededRequest | AddedRequest:
        """Validate the request's ``seed``; a seeded request gets a :class:`SeededRequest` state."""
        seed = request.params.get("seed")
        SEED.validate(seed, request.where)
        return request if seed is None else SeededRequest(params=request.params, seed=seed)

    def update_state(self, update: BatchUpdate | None) -> None:
        """Apply the batch changes and forget which rows are seeded when anything changed."""
        super().update_state(update)
        if update is not None:
            self._row_groups = None

    def row_groups(self) -> tuple[list[int], list[int]]:
        """The rows whose request has its own seed, and the other rows."""
        if self._row_groups is None:
            seeded: list[int] = []
            unseeded: list[int] = []
            for row in range(len(self.rows)):
                (seeded if isinstance(self.rows[row], SeededRequest) else unseeded).append(row)
            self._row_groups = (seeded, unseeded)
        return self._row_groups

    def engine_generator(self, device: torch.device) -> torch.Generator:
        """The generator of unseeded requests on ``device``, seeded from the ``seed`` option."""
        generator = self._engine_generators.get(device)
        if generator is None:
            generator = torch.Generator(device=device)
            seed = self.options.get("seed")
            if seed is None:
                generator.seed()
            else:
                generator.manual_seed(seed)
            self._engine_generators[device] = generator
        return generator

    def select(self, logits: torch.Tensor) -> torch.Tensor:
        """Draw one ``int64`` token id per row."""
        check_logits(logits, self.vocab_size, OWNER, len(self.rows))
        check_selectable(logits.max(dim=1).values, OWNER)
        probs = logits.to(working_dtype(logits)).softmax(dim=1)
        races = self.exponential_races(probs)
        return probs.div_(races).argmax(dim=1)

    def exponential_races(self, probs: torch.Tensor) -> torch.Tensor:
        """``Exp(1)`` noise shaped like ``probs``, one row per request.

        Seeded rows draw from their own generators, the others from the engine's; the noise is
        clamped away from 0 so that a zero probability divided by it stays 0.
        """
        races = torch.empty_like(probs)
        seeded, unseeded = self.row_groups()
        if unseeded:
            engine = self.engine_generator(probs.device)
            if seeded:
                races[unseeded] = torch.empty(
                    (len(unseeded), probs.shape[1]), dtype=probs.dtype, device=probs.device
                ).exponential_(generator=engine)
            else:
                races.exponential_(generator=engine)
        for row in seeded:  # one generator per request: a loop is unavoidable
            races[row].exponential_(generator=self.rows[row].generator_on(probs.device))
        return races.clamp_(min=torch.finfo(races.dtype).tiny)
