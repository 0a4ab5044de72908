"""Third-party samplers written against the core alone, registered in-process as a test would."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs
import torch

from pyagent_core import OptionSpec, hookimpl
from pyagent_core.config import Settings
from pyagent_core.interfaces.sampler import LogitsProcessor, SamplerContext, TokenSelector
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
