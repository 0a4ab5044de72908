"""XTC ("exclude top choices"): sometimes remove every likely token but the least likely of them."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import torch

from pyagent_core.interfaces.sampler import SamplerContext
from pyagent_sampler_base.common_params import SEED
from pyagent_sampler_base.multi_param import MultiParamProcessor, ParamCheck, ParamRow
from pyagent_sampler_base.precision import working_dtype
from pyagent_samplers_llamacpp.params import XTC_PROBABILITY, XTC_THRESHOLD

# Mixed into a request's seed so that XTC's coin flips do not reuse the token draws' random stream.
SEED_SALT = 0x5851F42D4C957F2D


class XtcRow(ParamRow):
    """An XTC row with its own generator when the request has a ``seed``."""

    def __init__(self, request: Any, values: dict[str, Any]) -> None:
        super().__init__(request, values)
        seed = values["seed"]
        self.generator = None if seed is None else torch.Generator().manual_seed(seed ^ SEED_SALT)


class XtcProcessor(MultiParamProcessor):
    """llama.cpp's XTC sampler (``--xtc-probability``, ``--xtc-threshold``).

    Each step, with probability ``xtc_probability``, a row whose softmax has two or more tokens with
    probability ``>= xtc_threshold`` loses all of them except the least probable (every token tied
    with that least probability stays). The coin is flipped from the request's own generator when it
    has a ``seed`` (so its result does not depend on the batch), else from the engine's generator
    (seeded from the ``seed`` option). ``xtc_probability=0`` turns it off.
    """

    request_params: ClassVar[tuple[ParamCheck, ...]] = (XTC_PROBABILITY, XTC_THRESHOLD, SEED)
    neutral: ClassVar[Mapping[str, Any]] = {"xtc_probability": 0.0, "xtc_threshold": 0.1, "seed": None}
    label: ClassVar[str] = "xtc sampler"

    def __init__(self, options: Mapping[str, Any], context: SamplerContext) -> None:
        super().__init__(options, context)
        self.engine_generator = torch.Generator()
        seed = self.options.get("seed")
        if seed is None:
            self.engine_generator.seed()
        else:
            self.engine_generator.manual_seed(seed ^ SEED_SALT)

    def is_argmax_invariant(self) -> bool:
        """False: removing the top choices is the point."""
        return False

    def is_active(self, values: Mapping[str, Any]) -> bool:
        """Rows with a positive probability and a threshold that two tokens can reach."""
        return bool(values["xtc_probability"] > 0 and values["xtc_threshold"] <= 0.5)

    def make_row(self, request: Any, values: dict[str, Any]) -> XtcRow:
        """An :class:`XtcRow` (with a generator when the request is seeded)."""
        return XtcRow(request, values)

    def coin(self, row: XtcRow) -> float:
        """A uniform draw in [0, 1) from the row's generator, or the engine's."""
        return float(torch.rand((), generator=row.generator or self.engine_generator))

    def process(self, logits: torch.Tensor, rows: list[int]) -> torch.Tensor:
        """Flip each row's coin, then remove its top choices where the coin says so."""
        states = [self.rows[r] for r in rows]
        chosen = [self.coin(s) <= s.values["xtc_probability"] for s in states]
        if not any(chosen):
            return logits
        scores = logits.to(working_dtype(logits))
        threshold = torch.tensor([s.values["xtc_threshold"] for s in states], dtype=scores.dtype,
                                 device=scores.device).unsqueeze(1)
        probs = scores.softmax(dim=-1)
        above = (probs >= threshold) & torch.isfinite(scores)
        least = torch.where(above, probs, float("inf")).min(dim=-1, keepdim=True).values
        enough = (above.sum(dim=-1, keepdim=True) >= 2) & torch.tensor(chosen, device=scores.device).unsqueeze(1)
        return scores.masked_fill(above & (probs > least) & enough, float("-inf"))
