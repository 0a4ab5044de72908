"""What the adapter registers in vLLM, from pyagent's registry alone: no vLLM, no torch import.

Samplers: the order string in ``PYAGENT_VLLM_SAMPLERS`` (``"dry,xtc,typical"``, as for ``pyagent
generate --samplers``; empty: none) or, when it is unset, every installed and available pyagent
logits processor with a stage, in pyagent's default chain order, less those vLLM has natively
(:data:`NATIVE_IN_VLLM`). vLLM runs non-argmax-invariant processors on the raw logits of every
request (before its penalties and temperature) and argmax-invariant ones after its temperature
(before min-p, top-k, top-p) for sampled requests only, so each processor goes to the vLLM
processor of its spec's ``argmax_invariant``.

Parsers: every installed tool-call and reasoning parser, as ``pyagent-<name>``. Proposers:
:data:`PROPOSERS`.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Mapping
from typing import Any

from pyagent_core.errors import SelectionError
from pyagent_core.kinds import PROPOSER, REASONING_PARSER, SAMPLER, TOOL_PARSER
from pyagent_core.registry import Registry
from pyagent_sampler_host.order import ChainResolver, parse_sampler_order

ORDER_ENV = "PYAGENT_VLLM_SAMPLERS"
PREFIX = "pyagent-"
"""Names of pyagent's parsers in vLLM: ``pyagent-hermes``, never vLLM's own ``hermes``."""
TOOL_PREFIX = "PyagentTool_"
REASONING_PREFIX = "PyagentReasoning_"
"""Attribute prefixes of the wrapper classes in :mod:`pyagent_vllm.parsers`."""

NATIVE_IN_VLLM: Mapping[str, str] = {
    "temperature": "temperature",
    "top_k": "top_k",
    "top_p": "top_p",
    "min_p": "min_p",
    "penalties": "repetition_penalty, frequency_penalty, presence_penalty (no penalty_last_n)",
    "logit_bias": "logit_bias",
    "bad_words": "bad_words (strings, tokenized by vLLM)",
    "allowed_token_ids": "allowed_token_ids",
    "min_tokens": "min_tokens",
}
"""pyagent processors left out of the default hosted set, with the vLLM ``SamplingParams`` field
that does their job. Name one in ``PYAGENT_VLLM_SAMPLERS`` to host pyagent's instead (its parameters
then go in ``extra_args``)."""

PROPOSERS: Mapping[str, str] = {
    "ngram": "pyagent_vllm.proposers.NgramProposer",
    "suffix": "pyagent_vllm.proposers.SuffixProposer",
}
"""pyagent proposers usable as ``speculative_config={"method": "custom_class", "model": ...}``."""


def hosted_order(registry: Registry, environ: Mapping[str, str] = os.environ) -> tuple[str, ...]:
    """The processors the adapter hosts, in chain order (see the module docstring).

    Raises :class:`~pyagent_core.errors.SelectionError` for an order that names a processor twice;
    an unknown name fails when the processors are built, with the installed names.
    """
    order = environ.get(ORDER_ENV)
    if order is not None:
        try:
            return parse_sampler_order(order)
        except SelectionError as error:
            raise SelectionError(f"{ORDER_ENV}={order!r}: {error}") from None
    plan = ChainResolver(registry).plan(None, with_selector=False)
    claimed = Counter(b.name for b in registry.backends(SAMPLER))
    return tuple(b.qualified_name if claimed[b.name] > 1 else b.name
                 for b in plan.processors if b.name not in NATIVE_IN_VLLM)


def split_by_invariance(registry: Registry, names: tuple[str, ...], argmax_invariant: bool) -> tuple[str, ...]:
    """Those of ``names`` whose spec's ``argmax_invariant`` is ``argmax_invariant``, in order."""
    return tuple(n for n in names if registry.get(SAMPLER, n).spec.argmax_invariant == argmax_invariant)


def parser_names(registry: Registry | None = None) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The installed tool-call and reasoning parsers' names (without the ``pyagent-`` prefix)."""
    from pyagent_core.registry import get_registry

    registry = registry or get_registry()
    return (tuple(b.name for b in registry.backends(TOOL_PARSER)),
            tuple(b.name for b in registry.backends(REASONING_PARSER)))


def inventory(registry: Registry, environ: Mapping[str, str] = os.environ) -> dict[str, Any]:
    """Everything the adapter registers in vLLM, and how to use it, as one JSON-ready mapping."""
    hosted = hosted_order(registry, environ)
    tools, reasoning = parser_names(registry)
    installed = {b.name for b in registry.backends(PROPOSER)}
    return {
        "logits_processors": {
            "pyagent_vllm.samplers:PyagentLogitsProcessors": list(split_by_invariance(registry, hosted, False)),
            "pyagent_vllm.samplers:PyagentArgmaxInvariantProcessors": list(split_by_invariance(registry, hosted, True)),
        },
        "native_in_vllm": dict(NATIVE_IN_VLLM),
        "tool_parsers": [PREFIX + name for name in tools],
        "reasoning_parsers": [PREFIX + name for name in reasoning],
        "proposers": {name: cls for name, cls in PROPOSERS.items() if name in installed},
    }
