"""The sampler chain: selected processors in order, then greedy or random token selection per row.

Samplers are batch-level objects (see :mod:`pyagent_core.interfaces.sampler`): they keep per-row
state, so the engine keeps each request in the same row from step to step and reports the
changes as a :class:`BatchUpdate` (removed, then added, then moved to fill the holes).

The processors run in the order of an order string such as ``"penalties,dry,top_k,temperature"``
(llama.cpp's ``--samplers``). When none is given, the chain holds every installed processor that
declares a stage, in the order its spec declares (see :func:`default_processor_order`): the engine
names no processor.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

import torch

from pyagent_core.errors import RequestError, SelectionError, UnknownBackendError
from pyagent_core.interfaces.grammar import TokenizerInfo
from pyagent_core.interfaces.sampler import (
    AddedRequest,
    BatchUpdate,
    LogitsProcessor,
    MovedRequest,
    MoveKind,
    SamplerContext,
    TokenSelector,
    fusable_step,
)
from pyagent_core.kinds import SAMPLER
from pyagent_core.registry import Registry
from pyagent_core.types import SamplerSpec
from pyagent_engine.requests.request import Request
from pyagent_engine.sampling.fused_mask import apply_processors

GREEDY, RANDOM = "greedy", "multinomial"


def default_processor_order(specs: Iterable[SamplerSpec]) -> tuple[str, ...]:
    """The default chain over ``specs``: every processor with a ``stage``, by stage (in the order of
    ``pyagent_core.types.SAMPLER_STAGES``), then ``position``, then name.

    Selectors and processors without a stage are left out (a chain runs them only when it names them).
    """
    staged = [spec for spec in specs if spec.stage is not None and not spec.selects_token]
    return tuple(spec.name for spec in sorted(staged, key=lambda spec: spec.chain_order))


def parse_sampler_order(order: str | Sequence[str]) -> tuple[str, ...]:
    """Processor names from an order string (``"top_k,top_p"``, comma, semicolon or space separated).

    Raises :class:`SelectionError` for a name given twice.
    """
    names = order.replace(";", ",").replace(" ", ",").split(",") if isinstance(order, str) else list(order)
    names = [name.strip() for name in names if name.strip()]
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        raise SelectionError(f"the sampler order {','.join(names)!r} names {repeated[0]!r} twice; "
                             "name each processor once")
    return tuple(names)


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


class SamplerRows:
    """Keeps each sampled request in a stable row and describes row changes as a :class:`BatchUpdate`."""

    def __init__(self, eos_token_ids: Sequence[int] = ()) -> None:
        self.rows: list[Request] = []
        self.eos_token_ids = tuple(eos_token_ids)

    def params(self, request: Request) -> dict[str, Any]:
        """The parameters the samplers see: the request's, with ``eos_token_ids`` (for ``min_tokens``)."""
        params = request.params.sampler_params()
        eos = () if request.params.ignore_eos else self.eos_token_ids
        params.setdefault("eos_token_ids", [*eos, *request.params.stop_token_ids])
        return params

    def update(self, sampled: Sequence[Request]) -> BatchUpdate | None:
        """Make the rows hold exactly ``sampled``; return the changes (``None`` when there are none)."""
        wanted = {id(r) for r in sampled}
        present = {id(r) for r in self.rows}
        removed = [i for i, r in enumerate(self.rows) if id(r) not in wanted]
        newcomers = [r for r in sampled if id(r) not in present]
        if not removed and not newcomers:
            return None
        rows: list[Request | None] = list(self.rows)
        for index in removed:
            rows[index] = None
        holes = list(removed)
        added = []
        for request in newcomers:
            index = holes.pop(0) if holes else len(rows)
            if index == len(rows):
                rows.append(request)
            else:
                rows[index] = request
            added.append(AddedRequest(index, self.params(request), request.prompt_token_ids,
                                      request.output_token_ids))
        moved = []
        for hole in sorted(holes):
            while rows and rows[-1] is None:
                rows.pop()
            if hole >= len(rows):
                break
            rows[hole] = rows.pop()
            moved.append(MovedRequest(len(rows), hole, MoveKind.MOVE))
        while rows and rows[-1] is None:
            rows.pop()
        self.rows = [r for r in rows if r is not None]
        return BatchUpdate(batch_size=len(self.rows), removed=tuple(removed), added=tuple(added),
                           moved=tuple(moved))


class SamplerChain:
    """Processors selected through the registry, then the greedy and multinomial selectors.

    Args:
        registry: where the samplers are looked up.
        vocab_size: the model's vocabulary size.
        processors: processor names in chain order, or an order string (see :func:`parse_sampler_order`);
            ``None``: every installed processor that declares a stage, in its declared order (see
            :func:`default_processor_order`), less those whose requirements are not met (listed in
            :attr:`skipped`). A name that is not an installed processor raises :class:`SelectionError`.
        options: options per sampler name (``--sampler-opt NAME.KEY=VALUE``), validated against its schema.
        eos_token_ids: the model's end-of-sequence ids: the samplers' :class:`SamplerContext` holds them,
            and requests get them as their ``eos_token_ids`` parameter.
        tokenizer_info: the model's tokenizer for samplers whose parameters hold text (DRY's string
            sequence breakers), built on its first call: the samplers' context holds it (see
            :attr:`SamplerContext.tokenizer_info`); ``None``: such samplers take token ids only.
    """

    def __init__(self, registry: Registry, vocab_size: int, processors: str | Sequence[str] | None = None,
                 options: Mapping[str, Mapping[str, Any]] | None = None,
                 eos_token_ids: Sequence[int] = (),
                 tokenizer_info: Callable[[], TokenizerInfo] | None = None) -> None:
        known = {b.name for b in registry.backends(SAMPLER) if not b.spec.selects_token}
        self.skipped: tuple[str, ...] = ()  # staged processors left out of the default chain: unavailable
        if processors is None:
            available = {b.name for b in registry.available(SAMPLER)}
            staged = default_processor_order(b.spec for b in registry.backends(SAMPLER))
            names = tuple(name for name in staged if name in available)
            self.skipped = tuple(name for name in staged if name not in available)
        else:
            names = parse_sampler_order(processors)
            for name in names:  # NAME, or DIST:NAME where two distributions register NAME
                try:
                    if registry.get(SAMPLER, name).spec.selects_token:
                        raise UnknownBackendError("sampler processor", name, known,
                                                  "greedy and multinomial end every chain by themselves")
                except UnknownBackendError as error:
                    raise UnknownBackendError("sampler processor", name, known, error.hint) from None
        options = dict(options or {})
        stray = sorted(set(options) - {*names, *(n.rpartition(":")[2] for n in names), GREEDY, RANDOM})
        if stray:
            raise SelectionError(f"sampler options name {stray[0]!r}, which is not in the chain "
                                 f"({','.join(names) or 'no processors'}); add it to the sampler order")
        self.selections = [registry.select(SAMPLER, name, options.get(name, options.get(name.rpartition(":")[2])))
                           for name in (*names, GREEDY, RANDOM)]
        self.context = SamplerContext(vocab_size, tuple(eos_token_ids), tokenizer_info=tokenizer_info)
        built = [registry.load(s.backend)(s.options, self.context) for s in self.selections]
        self.processors: list[LogitsProcessor] = [p for p in built[:-2] if isinstance(p, LogitsProcessor)]
        greedy, random = built[-2], built[-1]
        if len(self.processors) != len(names) or not isinstance(greedy, TokenSelector) or not isinstance(
            random, TokenSelector
        ):
            raise TypeError("the sampler chain needs logits processors followed by token selectors")
        self.greedy, self.random = greedy, random
        for processor in self.processors:
            fusable_step(processor)  # a processor that declares an unknown fused-mask step fails here
        self.rows = SamplerRows(self.context.eos_token_ids)
        # A greedy batch runs the processors up to the last one that can change a row's argmax.
        invariant = [p.is_argmax_invariant() for p in self.processors]
        self.greedy_prefix = max((i + 1 for i, inv in enumerate(invariant) if not inv), default=0)

    def check_params(self, request: Request) -> None:
        """Raise :class:`RequestError` when a sampler of the chain rejects the request's parameters,
        or when the request sets a parameter (``SamplingParams.extra``) that no sampler of the chain reads.

        A sampler reads a parameter when its options schema has that name (a request's value overrides
        the option) or when it looks the parameter up while checking the request (``row_state``).
        """
        params = _ReadParams(self.rows.params(request))
        added = AddedRequest(0, params, request.prompt_token_ids, [])
        for sampler in (*self.processors, self.greedy, self.random):
            try:
                sampler.row_state(added)
            except ValueError as error:
                raise RequestError(str(error).replace("request at row 0: ", "")) from None
        known = params.read | {key for s in self.selections for key in s.backend.spec.options}
        unknown = sorted(set(request.params.extra) - known)
        if unknown:
            close = difflib.get_close_matches(unknown[0], sorted(known), n=1)
            hint = f"did you mean {close[0]!r}? " if close else ""
            raise RequestError(f"unknown sampling parameter {unknown[0]!r}: no sampler of the chain "
                               f"({','.join(self.names)}) reads it; {hint}parameters they read: "
                               f"{', '.join(sorted(known))}")

    @property
    def names(self) -> list[str]:
        """Names of the samplers in chain order (processors, then the two selectors)."""
        return [s.backend.name for s in self.selections]

    def _sync(self, requests: Sequence[Request]) -> None:
        """Make the rows hold ``requests`` and tell every sampler what changed."""
        update = self.rows.update(requests)
        for sampler in (*self.processors, self.greedy, self.random):
            sampler.update_state(update)

    def _active(self, greedy: Sequence[bool], whole: bool = False) -> list[LogitsProcessor]:
        """The processors to run for rows with these greedy flags: an all-greedy batch stops after
        the last one that can change an argmax (unless ``whole``); processors that leave the batch
        unchanged (``leaves_batch_unchanged``) are skipped."""
        chain = self.processors[:self.greedy_prefix] if all(greedy) and not whole else self.processors
        return [p for p in chain if not p.leaves_batch_unchanged()]

    def greedy_rows(self, requests: Sequence[Request], logits: torch.Tensor,
                    whole: bool = False) -> list[int] | None:
        """The greedy token of every row of ``logits`` when sampling ``requests`` is a plain argmax
        (every request greedy, and no processor would change a row: see ``leaves_batch_unchanged``;
        with ``whole``, no processor of the whole chain, as :meth:`sample_processed` runs it), else None.

        That holds until the batch changes, whatever the requests generate, so ``logits`` may hold
        any number of rows per request - verification chooses every draft position at once.
        """
        self._sync(requests)
        greedy = [r.params.greedy for r in requests]
        if not all(greedy) or self._active(greedy, whole):
            return None
        tokens: list[int] = self.greedy.select(logits.float()).tolist()
        return tokens

    def sample(self, requests: Sequence[Request], logits: torch.Tensor) -> list[int]:
        """Draw one token per request; ``logits[i]`` belongs to ``requests[i]``.

        Rows are rearranged to the stable row order the samplers know, processed and selected.
        Processors that leave the whole batch unchanged are skipped; for an all-greedy batch in
        that order already with no processor left, the greedy selector reads ``logits`` itself.
        """
        return self._sample(requests, logits, False)[0]

    def sample_processed(self, requests: Sequence[Request], logits: torch.Tensor) -> tuple[list[int], torch.Tensor]:
        """:meth:`sample`, also returning the processed logits the tokens were chosen from
        (``[i]``: ``requests[i]``'s row).

        The whole chain runs, also for an all-greedy batch (whose tokens it cannot change: the
        processors past the greedy prefix keep the argmax), so a request's processed logits do
        not depend on what else is in the batch.
        """
        tokens, processed = self._sample(requests, logits, True)
        assert processed is not None
        return tokens, processed

    def _sample(self, requests: Sequence[Request], logits: torch.Tensor,
                keep: bool) -> tuple[list[int], torch.Tensor | None]:
        self._sync(requests)
        position = {id(r): i for i, r in enumerate(requests)}
        order = [position[id(r)] for r in self.rows.rows]
        greedy = [r.params.greedy for r in self.rows.rows]
        all_greedy, processors = all(greedy), self._active(greedy, keep)
        in_order = all_greedy and not processors and order == list(range(len(order)))
        batch = (logits if in_order else logits.index_select(0, torch.tensor(order))).float()
        batch = apply_processors(processors, batch)
        processed = None
        if keep:  # before selection, in request order
            row_of = {id(r): i for i, r in enumerate(self.rows.rows)}
            processed = batch.index_select(0, torch.tensor([row_of[id(r)] for r in requests]))
        if all_greedy:
            chosen = self.greedy.select(batch)
        else:
            chosen = torch.where(torch.tensor(greedy), self.greedy.select(batch), self.random.select(batch))
        tokens = chosen.tolist()
        by_request = {id(r): tokens[i] for i, r in enumerate(self.rows.rows)}
        return [by_request[id(r)] for r in requests], processed
