"""Sampler interface: batch-level logits processors and final token selectors.

The engine constructs each selected sampler once, tells it about requests entering, leaving and
moving between rows of the batch with :meth:`Sampler.update_state`, then on every step calls
:meth:`LogitsProcessor.apply` on the whole ``[num_requests, vocab]`` logits tensor (processors, in
chain order) and finally :meth:`TokenSelector.select` (one selector) to choose a token per row.

Each request carries its own parameters (``params``, keyed by parameter name such as ``"top_k"`` or
``"seed"``); a processor falls back to its engine-level options for a parameter a request leaves
unset. Rows whose parameter disables a processor must come out unchanged.
"""

from __future__ import annotations

import enum
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import attrs

if TYPE_CHECKING:
    import torch


@attrs.frozen
class AddedRequest:
    """A request placed at row ``index`` of the batch.

    ``output_token_ids`` is the engine's live list: it grows as tokens are generated, so processors
    that look at history (penalties, DRY) keep a reference instead of copying it.
    """

    index: int
    params: Mapping[str, Any]
    prompt_token_ids: Sequence[int] = ()
    output_token_ids: list[int] = attrs.field(factory=list)


class MoveKind(enum.Enum):
    """How a request changed rows: swapped with another row, or moved into an empty row."""

    SWAP = "swap"
    MOVE = "move"


@attrs.frozen
class MovedRequest:
    """Row ``src`` went to ``dst`` (and, for a swap, ``dst`` went to ``src``)."""

    src: int
    dst: int
    kind: MoveKind = MoveKind.SWAP


@attrs.frozen
class BatchUpdate:
    """Changes to the batch since the previous step, applied in order: removed, added, moved.

    ``batch_size`` is the number of rows after the update.
    """

    batch_size: int
    removed: tuple[int, ...] = ()
    added: tuple[AddedRequest, ...] = ()
    moved: tuple[MovedRequest, ...] = ()


class RequestRows:
    """Per-row bookkeeping that applies a :class:`BatchUpdate` to a list of row states.

    A processor subclasses :class:`Sampler`, whose default ``update_state`` keeps ``self.rows``
    up to date; ``self.rows[i]`` holds whatever :meth:`Sampler.row_state` returned for the request
    now at row ``i`` (``None`` for an empty row).
    """

    def __init__(self) -> None:
        self.states: list[Any] = []

    def __len__(self) -> int:
        return len(self.states)

    def __getitem__(self, index: int) -> Any:
        return self.states[index]

    def apply(self, update: BatchUpdate, make_state: Callable[[AddedRequest], Any]) -> None:
        """Apply ``update``; ``make_state(added_request)`` builds the state of a new row.

        Every new state is built before any row changes, so when ``make_state`` raises (a request
        with an invalid parameter) the rows are left exactly as they were.
        """
        new_states = [(added.index, make_state(added)) for added in update.added]
        size = max(update.batch_size, len(self.states))
        self.states.extend([None] * (size - len(self.states)))
        for index in update.removed:
            self.states[index] = None
        for index, state in new_states:
            if index >= len(self.states):
                self.states.extend([None] * (index + 1 - len(self.states)))
            self.states[index] = state
        for move in update.moved:
            src, dst = move.src, move.dst
            if move.kind is MoveKind.SWAP:
                self.states[src], self.states[dst] = self.states[dst], self.states[src]
            else:
                self.states[dst], self.states[src] = self.states[src], None
        del self.states[update.batch_size:]


class Sampler:
    """Shared base of processors and selectors: construction, options and batch bookkeeping.

    Args:
        options: the validated engine-level options of this sampler (defaults filled in).
        vocab_size: size of the logits' last dimension.
    """

    def __init__(self, options: Mapping[str, Any], vocab_size: int) -> None:
        self.options = dict(options)
        self.vocab_size = vocab_size
        self.rows = RequestRows()

    def row_state(self, request: AddedRequest) -> Any:
        """Build the per-row state of a new request (default: the request itself)."""
        return request

    def param(self, row: int, name: str, default: Any = None) -> Any:
        """The request's parameter ``name`` at ``row``, else this sampler's option, else ``default``."""
        state = self.rows[row]
        params = getattr(state, "params", None) or {}
        if name in params and params[name] is not None:
            return params[name]
        return self.options.get(name, default)

    def update_state(self, update: BatchUpdate | None) -> None:
        """Apply the batch changes since the last step (``None``: nothing changed)."""
        if update is not None:
            self.rows.apply(update, self.row_state)

    @classmethod
    def check_available(cls) -> None:
        """Raise with a reason if this sampler cannot run here (deep check, ``--check``)."""


class LogitsProcessor(Sampler, ABC):
    """Transforms the batch's logits; rows that the processor leaves alone come out unchanged."""

    @abstractmethod
    def is_argmax_invariant(self) -> bool:
        """True when :meth:`apply` never changes a row's argmax (the engine skips it for greedy rows)."""

    def leaves_batch_unchanged(self) -> bool:
        """True when :meth:`apply` would return every row of the current batch unchanged, so the
        engine may skip the call (default: False, the call always runs).

        The answer may depend on the rows' parameters, never on the tokens they generate: it must
        hold for every step until the next :meth:`update_state` with a change. A processor that
        keeps history (token counts, a running estimate) must stay correct when calls are skipped.
        """
        return False

    @abstractmethod
    def apply(self, logits: torch.Tensor) -> torch.Tensor:
        """Return processed logits of the same shape ``[num_requests, vocab]``; may work in place."""


class TokenSelector(Sampler, ABC):
    """Chooses the next token of every row from processed logits (greedy, multinomial...)."""

    @abstractmethod
    def select(self, logits: torch.Tensor) -> torch.Tensor:
        """Return an ``int64`` tensor ``[num_requests]`` of chosen token ids."""
