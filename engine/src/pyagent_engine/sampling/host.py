"""The engine's sampler host: the shared one (``pyagent-sampler-host``) over the engine's requests.

:func:`sampler_host` builds a :class:`~pyagent_sampler_host.host.SamplerHost` for the engine's
:class:`~pyagent_engine.requests.request.Request`: the chain comes from the registry (an order string,
or every installed processor that declares a stage), its token selector is the order's last name or
the sampler kind's selection (``--samplers ...,gumbel``, ``PYAGENT_SAMPLER``, ``pyagent.toml``, the
user config, else the highest priority), and a name that a third party registers beside a
distribution the engine requires resolves to the latter (with one warning). The engine names no
sampler.

What the samplers see of a request (:func:`request_row`): its sampler parameters, less those unset
(``None``) and the engine's own fields at their neutral value (temperature 1, top-k 0, top-p 1: a
sampler then uses its option),
with ``eos_token_ids`` (the model's end-of-sequence ids unless the request ignores them, and its stop
token ids) for ``min_tokens``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs

from pyagent_core.interfaces.grammar import TokenizerInfo
from pyagent_core.registry import Registry
from pyagent_engine.requests.params import SamplingParams
from pyagent_engine.requests.request import Request
from pyagent_sampler_host.host import SamplerHost
from pyagent_sampler_host.order import required_distributions
from pyagent_sampler_host.rows import RowRequest

ENGINE_DIST = "pyagent-engine"
"""The engine's distribution: the sampler distributions it requires win names that others register too."""

NEUTRAL = {name: getattr(attrs.fields(SamplingParams), name).default for name in ("temperature", "top_k", "top_p")}
"""The engine's own sampler fields at the values that leave the logits alone (their defaults)."""


def request_row(eos_token_ids: Sequence[int]) -> Callable[[Request], RowRequest]:
    """What the samplers see of a request, for a model whose end-of-sequence ids are ``eos_token_ids``."""
    model_eos = tuple(eos_token_ids)

    def row(request: Request) -> RowRequest:
        params = {name: value for name, value in request.params.sampler_params().items()
                  if value is not None and not (name in NEUTRAL and value == NEUTRAL[name])}
        eos = () if request.params.ignore_eos else model_eos
        params.setdefault("eos_token_ids", [*eos, *request.params.stop_token_ids])
        return RowRequest(params, request.prompt_token_ids, request.output_token_ids)

    return row


def sampler_host(registry: Registry, vocab_size: int, order: str | Sequence[str] | None = None,
                 options: Mapping[str, Mapping[str, Any]] | None = None, eos_token_ids: Sequence[int] = (),
                 tokenizer_info: Callable[[], TokenizerInfo] | None = None) -> SamplerHost[Request]:
    """The engine's sampler host (arguments as for :class:`~pyagent_sampler_host.host.SamplerHost`)."""
    return SamplerHost(registry, vocab_size, order, options, eos_token_ids, tokenizer_info,
                       describe=request_row(eos_token_ids), prefer=required_distributions(ENGINE_DIST))
