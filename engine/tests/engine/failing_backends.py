"""Third-party backends with bugs that one request triggers, for the engine's failure-isolation tests.

The module is a plugin (the module an entry point names, holding the hookimpls);
tests put its folder on ``sys.path`` (or ``PYTHONPATH`` for the CLI) and register it:

- ``tp_fragile``, a logits processor whose ``apply`` raises for a batch holding a row whose request
  sets ``fragile=True``, and raises ``KeyboardInterrupt`` for one that sets ``interrupt=True``;
- ``tp_limited``, paged attention whose kernel raises for a batch holding a sequence longer than
  :data:`LIMIT` tokens (it attends correctly to every other batch);
- ``tp_broken``, the highest-priority attention backend, whose implementation does not import.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch

from pyagent_core import hookimpl
from pyagent_core.interfaces.attention import AttentionBackend, AttentionContext, AttentionMetadata
from pyagent_core.interfaces.sampler import AddedRequest, LogitsProcessor
from pyagent_core.registry import get_registry
from pyagent_core.types import AttentionSpec, SamplerSpec

LIMIT = 48


class FragileProcessor(LogitsProcessor):
    """Adds nothing to the logits, but fails on any batch with a ``fragile`` or ``interrupt`` row."""

    def is_argmax_invariant(self) -> bool:
        return False  # so that greedy batches run it too

    def leaves_batch_unchanged(self) -> bool:
        return False

    def row_state(self, request: AddedRequest) -> AddedRequest:
        """Read the two parameters, so that the chain knows this processor takes them."""
        request.params.get("fragile")
        request.params.get("interrupt")
        return request

    def apply(self, logits: torch.Tensor) -> torch.Tensor:
        rows = range(len(self.rows))
        if any(self.param(row, "interrupt", False) for row in rows):
            raise KeyboardInterrupt
        fragile = [row for row in rows if self.param(row, "fragile", False)]
        if fragile:
            raise ValueError(f"tp_fragile cannot handle row {fragile[0]}")
        return logits


class LengthLimitedAttention(AttentionBackend):
    """The ``paged`` backend, except that a batch with a sequence over :data:`LIMIT` tokens raises."""

    def __init__(self, options: Mapping[str, Any], context: AttentionContext) -> None:
        super().__init__(options, context)
        registry = get_registry()
        paged = registry.select("attention", "paged")
        self.inner = registry.load(paged.backend)(paged.options, context)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, kv_cache: torch.Tensor,
                metadata: AttentionMetadata, layer: int) -> torch.Tensor:
        longest = int(metadata.seq_lens.max())
        if longest > LIMIT:
            raise RuntimeError(f"tp_limited kernel: a sequence of {longest} tokens exceeds its {LIMIT}")
        return self.inner.forward(q, k, v, kv_cache, metadata, layer)


SAMPLER_SPECS = (SamplerSpec(name="tp_fragile", impl=f"{__name__}:FragileProcessor", summary="Fails on request."),)
ATTENTION_SPECS = (
    AttentionSpec(name="tp_limited", impl=f"{__name__}:LengthLimitedAttention", dtypes=("float32", "bfloat16"),
                  summary="Paged attention with a sequence-length bug."),
    AttentionSpec(name="tp_broken", impl="pyagent_no_such_distribution.attention:Backend", priority=1000,
                  dtypes=("float32", "bfloat16"), summary="The default, but its implementation is missing."),
)


@hookimpl
def pyagent_register_samplers(register: Callable[[SamplerSpec], None]) -> None:
    """Register ``tp_fragile``."""
    for spec in SAMPLER_SPECS:
        register(spec)


@hookimpl
def pyagent_register_attention_backends(register: Callable[[AttentionSpec], None]) -> None:
    """Register ``tp_limited`` and ``tp_broken``."""
    for spec in ATTENTION_SPECS:
        register(spec)
