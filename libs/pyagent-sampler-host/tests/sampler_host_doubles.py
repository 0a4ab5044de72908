"""Third-party samplers written against the core alone, registered in-process as a test would."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs
import torch

from pyagent_core import OptionSpec, hookimpl
from pyagent_core.config import Settings
from pyagent_core.interfaces.sampler import AddedRequest, BatchUpdate, LogitsProcessor, SamplerContext, TokenSelector
from pyagent_core.registry import Registry
from pyagent_core.types import SamplerSpec
from pyagent_sampler_host.rows import RowRequest


class LowestIdSelector(TokenSelector):
    """Chooses each row's lowest token id with a finite logit, and records the logits it was given."""

    seen: list[torch.Tensor]

    def __init__(self, options: Mapping[str, Any], context: SamplerContext) -> None:
        super().__init__(options, context)
        self.seen = []

    def select(self, logits: torch.Tensor) -> torch.Tensor:
        self.seen.append(logits.clone())
        return torch.isfinite(logits).int().argmax(dim=1)


class Shift(LogitsProcessor):
    """Adds the request's ``shift`` to every logit of its row (0: off)."""

    def is_argmax_invariant(self) -> bool:
        return True

    def leaves_batch_unchanged(self) -> bool:
        return all(self.param(row, "shift", 0.0) == 0 for row in range(len(self.rows)))

    def apply(self, logits: torch.Tensor) -> torch.Tensor:
        shifts = [float(self.param(row, "shift", 0.0)) for row in range(len(self.rows))]
        return logits.add_(torch.tensor(shifts, dtype=logits.dtype).unsqueeze(1))


class ThirdPartyTopK(LogitsProcessor):
    """Keeps each row's ``top_k`` largest logits (and those tied with the k-th); 0 turns it off.

    One step of the fused mask: ``mask_step`` and ``row_values`` are all it takes. It counts the
    calls of :meth:`apply`, so a test can tell whether a chain ran it or the kernel did.
    """

    mask_step = "top_k"

    def __init__(self, options: Mapping[str, Any], context: SamplerContext) -> None:
        super().__init__(options, context)
        self.apply_calls = 0
        self._values: list[int] | None = None

    def row_state(self, request: AddedRequest) -> AddedRequest:
        k = request.params.get("top_k")
        if k is not None and (isinstance(k, bool) or not isinstance(k, int) or k < 0):
            raise ValueError(f"{request.where}: top_k={k!r} is invalid; use an integer >= 0")
        return request

    def update_state(self, update: BatchUpdate | None) -> None:
        super().update_state(update)
        if update is not None:
            self._values = None

    def row_values(self) -> list[int]:
        if self._values is None:
            self._values = [int(self.param(row, "top_k", 0)) for row in range(len(self.rows))]
        return self._values

    def is_argmax_invariant(self) -> bool:
        return True

    def leaves_batch_unchanged(self) -> bool:
        return all(k <= 0 or k >= self.vocab_size for k in self.row_values())

    def apply(self, logits: torch.Tensor) -> torch.Tensor:
        self.apply_calls += 1
        if logits.ndim != 2 or tuple(logits.shape) != (len(self.rows), self.vocab_size):
            raise ValueError(f"tp_top_k: logits of shape {tuple(logits.shape)}; expected "
                             f"[{len(self.rows)}, {self.vocab_size}]")
        for row, k in enumerate(self.row_values()):
            if 0 < k < self.vocab_size:
                kth = torch.topk(logits[row], k).values[-1]
                logits[row].masked_fill_(logits[row] < kth, float("-inf"))
        return logits


class UnknownStep(Shift):
    """Claims a fused-mask step the kernel does not have."""

    mask_step = "top_a"

    def row_values(self) -> list[float]:
        return [0.0] * len(self.rows)


SELECTOR = SamplerSpec(name="tp_lowest", impl=f"{__name__}:LowestIdSelector", stage="select",
                       summary="A third party's selector.")
SHIFT = SamplerSpec(name="tp_shift", impl=f"{__name__}:Shift", argmax_invariant=True, stage="penalties",
                    position=15, options={"shift": OptionSpec(type=float, default=0.0, request=True,
                                                              request_help="Add this to every logit.")})


@attrs.define(eq=False)  # pluggy keeps plugins in sets
class Plugin:
    """A hookimpl object registering ``specs``, as a third-party distribution's entry point would."""

    specs: Sequence[SamplerSpec]

    @hookimpl
    def pyagent_register_samplers(self, register: Callable[[SamplerSpec], None]) -> None:
        for spec in self.specs:
            register(spec)


def registry(*specs: SamplerSpec, plugin: str = "third-party-samplers", environ: Mapping[str, str] | None = None,
             cwd: Path | None = None) -> Registry:
    """The installed plugins plus one in-process plugin registering ``specs``; selections come from
    ``environ`` and the ``pyagent.toml`` at ``cwd`` (default: none), never the developer's files."""
    env = {"PYAGENT_USER_CONFIG": "/nonexistent/pyagent-user.toml", **(environ or {})}
    settings = Settings.load(env, cwd=cwd or Path("/nonexistent"))
    return Registry(plugins=[(plugin, Plugin(specs))], environ=env, settings=settings).load_plugins()


@attrs.define
class Req:
    """A host's request: its sampler parameters, prompt and output list."""

    params: dict[str, Any]
    prompt: list[int] = attrs.field(factory=lambda: [1, 2, 3])
    outputs: list[int] = attrs.field(factory=list)


def describe(request: Req) -> RowRequest:
    """What the samplers see of a :class:`Req`."""
    return RowRequest(request.params, request.prompt, request.outputs)
