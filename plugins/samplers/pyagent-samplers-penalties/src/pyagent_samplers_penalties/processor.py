"""The ``penalties`` processor: repetition, frequency and presence penalties from token counts.

Each request gets a slot of :class:`pyagent_kernels.penalties.PenaltyCounts` when it joins the
batch; its counts are built then from its prompt and any output it already has (restricted to the
last ``penalty_last_n`` tokens), and every step adds the tokens generated since, and removes the
ones that left the window, in one kernel call for the whole batch. The penalty itself then visits
only the tokens each request has seen.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import attrs
import torch

from pyagent_core.interfaces.sampler import AddedRequest, BatchUpdate, LogitsProcessor, SamplerContext
from pyagent_kernels.penalties import PenaltyCounts, PenaltyParams, update_penalty_counts
from pyagent_samplers_penalties.params import FREQUENCY, LAST_N, PARAMS, PRESENCE, REPETITION

OWNER = "penalties sampler"


@attrs.define
class PenaltyRow:
    """A request's state: its parameters, token history and counting progress.

    ``output`` is the engine's live list; ``counted`` output tokens are in the counts, and the
    window starts at context position ``start`` (context = prompt + output).
    """

    params: Mapping[str, Any]
    prompt: Sequence[int]
    output: list[int]
    last_n: int
    slot: int = -1
    counted: int = 0
    start: int = 0

    def token_at(self, position: int) -> int:
        """The context token at ``position``."""
        n = len(self.prompt)
        return int(self.prompt[position]) if position < n else int(self.output[position - n])


class _Deltas:
    """Count changes collected for one kernel call."""

    def __init__(self) -> None:
        self.slots: list[int] = []
        self.tokens: list[int] = []
        self.seen: list[int] = []
        self.out: list[int] = []

    def add(self, slot: int, token: int, sign: int, is_output: bool) -> None:
        """Queue ``sign`` (+1 or -1) for ``token`` of ``slot`` (also in the output counts when ``is_output``)."""
        self.slots.append(slot)
        self.tokens.append(token)
        self.seen.append(sign)
        self.out.append(sign if is_output else 0)

    def flush(self, counts: PenaltyCounts, backend: str) -> None:
        """Apply the collected changes with one kernel call."""
        if self.slots:
            update_penalty_counts(counts, self.slots, self.tokens, self.seen, self.out,
                                  backend=backend)  # type: ignore[arg-type]


class PenaltiesProcessor(LogitsProcessor):
    """Repetition (transformers), frequency and presence (OpenAI) penalties, per request.

    For each token in the penalised context (prompt + output, or its last ``penalty_last_n``
    tokens): ``x = x * rp if x < 0 else x / rp``; for those among the output tokens also
    ``x -= fp * count`` and ``x -= pp``.
    """

    def __init__(self, options: Mapping[str, Any], context: SamplerContext) -> None:
        super().__init__(options, context)
        for param in PARAMS:
            param.validate(self.options.get(param.name), f"option of the {OWNER}")
        self.backend = str(self.options.get("backend") or "auto")
        self.counts = PenaltyCounts(0, self.vocab_size)
        self._free: list[int] = []
        self._owners: dict[int, PenaltyRow] = {}
        self._params: PenaltyParams | None = None  # with _slot_list, rebuilt when the batch changes
        self._slot_list: list[int] = []
        self._unchanged: bool | None = None  # leaves_batch_unchanged(), until the batch changes

    def is_argmax_invariant(self) -> bool:
        """False: a penalty can lower the top token below another."""
        return False

    def row_state(self, request: AddedRequest) -> PenaltyRow:
        """Validate the request's penalties; its counts are built at the next :meth:`apply`."""
        for param in PARAMS:
            param.validate(request.params.get(param.name), request.where)
        state = PenaltyRow(params=request.params, prompt=request.prompt_token_ids,
                           output=request.output_token_ids, last_n=-1)
        return state

    def update_state(self, update: BatchUpdate | None) -> None:
        """Apply the batch changes and release the count slots of requests that left."""
        super().update_state(update)
        if update is None:
            return
        self._params = self._unchanged = None
        live = {id(state) for state in self.rows.states if state is not None}
        for slot, owner in list(self._owners.items()):
            if id(owner) not in live:
                del self._owners[slot]
                self._free.append(slot)

    def _value(self, row: int, name: str, neutral: Any) -> Any:
        return self.param(row, name, neutral)

    def leaves_batch_unchanged(self) -> bool:
        """True when no row penalises anything: each has an empty window (``penalty_last_n`` 0) or
        neutral penalties. Skipped steps are counted at the next :meth:`apply`."""
        if self._unchanged is None:
            self._unchanged = all(
                self._value(r, LAST_N.name, LAST_N.neutral) == 0
                or all(float(self._value(r, p.name, p.neutral)) == p.neutral for p in (REPETITION, FREQUENCY, PRESENCE))
                for r in range(len(self.rows)))
        return self._unchanged

    def row_parameters(self) -> PenaltyParams:
        """Each row's slot and ``(repetition, frequency, presence)`` (rebuilt when the batch changes)."""
        if self._params is None:
            rows = range(len(self.rows))
            off = [self._value(r, LAST_N.name, LAST_N.neutral) == 0 for r in rows]
            repetition, frequency, presence = (
                [param.neutral if off[r] else float(self._value(r, param.name, param.neutral)) for r in rows]
                for param in (REPETITION, FREQUENCY, PRESENCE)
            )
            self._slot_list = [self.rows[r].slot for r in rows]
            self._params = PenaltyParams(self._slot_list, repetition=repetition, frequency=frequency,
                                         presence=presence)
        return self._params

    def _assign_slot(self, row: int, state: PenaltyRow, deltas: _Deltas) -> None:
        """Give a new request a cleared slot and queue the counts of its current context."""
        if not self._free:
            old = self.counts.num_slots
            self.counts.grow(max(4, 2 * old))
            self._free.extend(range(self.counts.num_slots - 1, old - 1, -1))
        state.slot = self._free.pop()
        self.counts.clear(state.slot)
        self._owners[state.slot] = state
        state.last_n = int(self._value(row, LAST_N.name, LAST_N.neutral))
        state.counted = len(state.output)
        length = len(state.prompt) + state.counted
        state.start = max(0, length - state.last_n) if state.last_n > 0 else 0
        prompt_len = len(state.prompt)
        for position in range(state.start, length):
            deltas.add(state.slot, state.token_at(position), 1, position >= prompt_len)

    def _advance(self, state: PenaltyRow, deltas: _Deltas) -> None:
        """Queue the tokens generated since the last step, and drop those that left the window."""
        prompt_len = len(state.prompt)
        for index in range(state.counted, len(state.output)):
            deltas.add(state.slot, int(state.output[index]), 1, True)
        state.counted = len(state.output)
        if state.last_n > 0:
            length = prompt_len + state.counted
            while length - state.start > state.last_n:
                deltas.add(state.slot, state.token_at(state.start), -1, state.start >= prompt_len)
                state.start += 1

    def sync_counts(self) -> None:
        """Bring every row's counts up to date with its history (one kernel call)."""
        states = self.rows.states
        if self._params is not None:  # the usual step: every row gained one token, none has a window
            tokens = [int(state.output[-1]) for state in states
                      if state.last_n <= 0 and len(state.output) == state.counted + 1]
            if len(tokens) == len(states):
                for state in states:
                    state.counted += 1
                ones = [1] * len(tokens)
                update_penalty_counts(self.counts, self._slot_list, tokens, ones, ones,
                                      backend=self.backend)  # type: ignore[arg-type]
                return
        deltas = _Deltas()
        for row, state in enumerate(states):
            if state.slot < 0:
                self._assign_slot(row, state, deltas)
                self._params = None
            else:
                self._advance(state, deltas)
        deltas.flush(self.counts, self.backend)

    def apply(self, logits: torch.Tensor) -> torch.Tensor:
        """Penalise the batch's logits in place (float32 CPU logits; others are converted and copied back)."""
        if logits.ndim != 2 or logits.shape[0] != len(self.rows) or logits.shape[1] != self.vocab_size:
            raise ValueError(
                f"{OWNER}: logits have shape {tuple(logits.shape)} but the batch holds {len(self.rows)} "
                f"requests over vocab_size={self.vocab_size}; pass every BatchUpdate to update_state first"
            )
        self.sync_counts()
        work = logits if logits.dtype == torch.float32 and logits.is_contiguous() else logits.float().contiguous()
        self.row_parameters().apply(work, self.counts, backend=self.backend)  # type: ignore[arg-type]
        if work is not logits:
            logits.copy_(work)
        return logits
