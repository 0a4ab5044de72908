"""A built sampler chain: its processors in order and, where the host selects tokens, its selector.

:class:`Chain` is what every host shares, whatever feeds it batches: it builds the samplers of a
:class:`~pyagent_sampler_host.order.ChainPlan`, passes each :class:`BatchUpdate` on to all of them,
runs the processors that would change some row (fusing neighbours into one kernel call, see
:mod:`pyagent_sampler_host.fused_mask`), and checks a request's parameters before it joins
(:meth:`Chain.check_params`). The engine drives it through :class:`~pyagent_sampler_host.host.SamplerHost`
(stable rows and token selection), the vLLM adapter from vLLM's batch updates, the transformers adapter
from the rows of ``input_ids``.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from typing import Any

import torch

from pyagent_core.errors import RequestError, SelectionError
from pyagent_core.interfaces.grammar import TokenizerInfo
from pyagent_core.interfaces.sampler import (
    GREEDY_PARAM,
    AddedRequest,
    BatchUpdate,
    LogitsProcessor,
    Sampler,
    SamplerContext,
    TokenSelector,
    fusable_step,
    is_greedy,
)
from pyagent_core.kinds import SAMPLER
from pyagent_core.registry import Registry, Selection
from pyagent_core.types import SamplerSpec
from pyagent_sampler_host.fused_mask import apply_processors
from pyagent_sampler_host.order import ChainPlan, ChainResolver, check_option_names, option_table

CHECK_WHERE = "request"
"""How a sampler's messages name a request checked before it joins (see ``AddedRequest.where``)."""

HOST_PARAMS = frozenset({"eos_token_ids"})
"""Parameters a host adds to every request (the ids that end it, for ``min_tokens``), which no sampler
need read."""


class _ReadParams(dict[str, Any]):
    """A request's parameters that remember which names a sampler looked up (iterating reads them all)."""

    def __init__(self, params: Mapping[str, Any]) -> None:
        super().__init__(params)
        self.read: set[str] = set()

    def __getitem__(self, key: str) -> Any:
        self.read.add(key)
        return super().__getitem__(key)

    def get(self, key: str, default: Any = None) -> Any:
        self.read.add(key)
        return super().get(key, default)

    def __contains__(self, key: object) -> bool:
        self.read.add(str(key))
        return super().__contains__(key)

    def __iter__(self) -> Iterator[str]:
        self.read.update(self.keys())
        return super().__iter__()

    def items(self) -> Any:
        self.read.update(self.keys())
        return super().items()


class Chain:
    """The samplers of a chain, built for one model.

    Args:
        registry: where the samplers are looked up.
        vocab_size: the model's vocabulary size (the logits' width).
        order: sampler names in chain order, or an order string (see
            :func:`~pyagent_sampler_host.order.parse_sampler_order`), which may end with a token selector;
            ``None``: every installed processor that declares a stage, in its declared order, less those
            whose requirements are not met (listed in :attr:`skipped`).
        options: options per sampler name or ``DIST:NAME`` (``--sampler-opt NAME.KEY=VALUE``), validated
            against its schema, over the option tables of the config files.
        eos_token_ids: the model's end-of-sequence ids (the samplers' :class:`SamplerContext` holds them).
        tokenizer_info: the model's tokenizer for samplers whose parameters hold text (DRY's string
            sequence breakers), built on its first call; ``None``: such samplers take token ids only.
        with_selector: build a token selector too (the order's last name if it is one, else the sampler
            kind's selection); ``False`` for a runtime that selects tokens itself (an order naming a
            selector is then an error).
        prefer: distributions whose sampler wins a name several distributions register (see
            :class:`~pyagent_sampler_host.order.ChainResolver`).

    Raises:
        SelectionError: an unknown, unavailable or ambiguous sampler, a selector out of place, or options
            for a sampler outside the chain.
        OptionError: an option its sampler's schema refuses.
        ConfigError: a processor declaring a fused-mask step that does not exist.
    """

    def __init__(self, registry: Registry, vocab_size: int, order: str | Sequence[str] | None = None,
                 options: Mapping[str, Mapping[str, Any]] | None = None, eos_token_ids: Sequence[int] = (),
                 tokenizer_info: Callable[[], TokenizerInfo] | None = None, *, with_selector: bool = True,
                 prefer: Collection[str] = ()) -> None:
        self.registry = registry
        self.plan: ChainPlan = ChainResolver(registry, prefer).plan(order, with_selector=with_selector)
        options = dict(options or {})
        check_option_names(options, self.plan)
        self.selections: list[Selection[SamplerSpec]] = [
            registry.select(SAMPLER, backend.qualified_name, option_table(options, backend))
            for backend in self.plan.processors]
        if self.plan.selector is not None:
            chosen = self.plan.selector.backend
            table = option_table(options, chosen)
            self.selections.append(self.plan.selector if table is None else
                                   registry.select(SAMPLER, chosen.qualified_name, table))
        self.context = SamplerContext(vocab_size, tuple(eos_token_ids), tokenizer_info=tokenizer_info)
        built = [registry.load(s.backend)(s.options, self.context) for s in self.selections]
        count = len(self.plan.processors)
        self.processors: list[LogitsProcessor] = list(built[:count])
        self.selector: TokenSelector | None = built[count] if len(built) > count else None
        for selection, sampler in zip(self.selections, built, strict=True):
            wanted = TokenSelector if selection.backend.spec.selects_token else LogitsProcessor
            if not isinstance(sampler, wanted):
                raise SelectionError(f"sampler {selection.backend.name!r} ({selection.backend.spec.impl}) is not a "
                                     f"{wanted.__name__}, as its spec's stage "
                                     f"{selection.backend.spec.stage!r} declares")
        for processor in self.processors:
            fusable_step(processor)  # a processor that declares an unknown fused-mask step fails here
        # A greedy batch runs the processors up to the last one that can change a row's argmax.
        invariant = [p.is_argmax_invariant() for p in self.processors]
        self.greedy_prefix = max((i + 1 for i, inv in enumerate(invariant) if not inv), default=0)

    @property
    def names(self) -> list[str]:
        """Names of the samplers in chain order (processors, then the selector)."""
        return [s.backend.name for s in self.selections]

    @property
    def skipped(self) -> tuple[str, ...]:
        """Staged processors the default chain left out: their requirements are not met here."""
        return self.plan.skipped

    @property
    def samplers(self) -> list[Sampler]:
        """Every built sampler: the processors in order, then the selector (if any)."""
        return [*self.processors, *([self.selector] if self.selector is not None else [])]

    def update_state(self, update: BatchUpdate | None) -> None:
        """Pass the batch's changes since the last step (``None``: none) on to every sampler."""
        for sampler in self.samplers:
            sampler.update_state(update)

    def active(self, all_greedy: bool = False, whole: bool = False) -> list[LogitsProcessor]:
        """The processors to run on the current batch: those whose ``leaves_batch_unchanged`` is false;
        for an all-greedy batch, only up to the last one that can change an argmax (unless ``whole``)."""
        chain = self.processors[:self.greedy_prefix] if all_greedy and not whole else self.processors
        return [p for p in chain if not p.leaves_batch_unchanged()]

    def process(self, logits: torch.Tensor, processors: Sequence[LogitsProcessor] | None = None) -> torch.Tensor:
        """Run ``processors`` (default: :meth:`active`) on float32 ``logits [rows, vocab]`` in chain
        order, fusing what can be fused; returns the processed logits (in place where possible)."""
        return apply_processors(self.active() if processors is None else processors, logits)

    def check_values(self, params: Mapping[str, Any], prompt_token_ids: Sequence[int] = ()) -> set[str]:
        """Run every sampler's own check of a request's parameters (``row_state``, as when the request
        joins a batch), before the request has a row; return the parameter names the samplers read.

        Raises :class:`RequestError` with the sampler's message (``request: NAME=VALUE is invalid; ...``).
        """
        read = _ReadParams(params)
        request = AddedRequest(0, read, tuple(prompt_token_ids), [], where=CHECK_WHERE)
        for sampler in self.samplers:
            try:
                sampler.row_state(request)
            except ValueError as error:
                raise RequestError(str(error)) from None
        return read.read

    def check_params(self, params: Mapping[str, Any], prompt_token_ids: Sequence[int] = ()) -> None:
        """Raise :class:`RequestError` when the chain cannot serve a request with these parameters.

        - A sampler rejects a value (:meth:`check_values`; the message names the parameter, the value
          and what is allowed).
        - The request sets a parameter no sampler of the chain reads (a sampler reads the names of its
          options schema and those it looks up while checking the request): the message names the
          parameter, the chain and the installed samplers that read it. ``None`` counts as unset, and
          a host leaves out parameters at their neutral value. A temperature of 0 is greedy, which the
          host's selection serves (see ``TokenSelector``), so it needs no temperature processor.
        """
        read = self.check_values(params, prompt_token_ids)
        known = read | {key for s in self.selections for key in s.backend.spec.options} | HOST_PARAMS
        unread = sorted(name for name, value in params.items() if value is not None and name not in known
                        and not (name == GREEDY_PARAM and is_greedy(params)))
        if unread:
            raise RequestError(self._unread_message(unread[0], params[unread[0]], sorted(known - HOST_PARAMS)))

    def _unread_message(self, name: str, value: Any, known: list[str]) -> str:
        chain = ",".join(self.names) or "no samplers"
        readers = sorted({b.name for b in self.registry.backends(SAMPLER) if name in b.spec.options})
        if readers:
            return (f"sampling parameter {name}={value!r} needs a sampler the chain ({chain}) lacks: {name} is read "
                    f"by {', '.join(readers)}; add one to the sampler order, or leave {name} unset")
        close = difflib.get_close_matches(name, known, n=1)
        hint = f"did you mean {close[0]!r}? " if close else ""
        return (f"unknown sampling parameter {name!r}: no sampler of the chain ({chain}) reads it; {hint}"
                f"parameters they read: {', '.join(known)}")
