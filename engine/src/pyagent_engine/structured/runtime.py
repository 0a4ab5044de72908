"""The engine side of structured output: requests waiting for their grammar, masks, accepts, jump-forward.

A constrained request is held here (not in the scheduler) until its grammar is compiled; the
engine polls each step and admits the ready ones, and fails those whose compile failed or ran past
the time limit, while every other request keeps running. Each step, the rows of the sampled batch
that belong to constrained requests get their bitmask row filled by the request's matcher and
applied to the logits with the ``pyagent-kernels`` bitmask kernel, before the sampler chain. The
sampled token is accepted into the matcher; then, with jump-forward on, the tokens the grammar forces
are accepted and appended without sampling (counted per request).

Jump-forward forces a token only when it is the single token the grammar allows (one bit set in the
request's bitmask row): the masked logits then have one finite entry, so sampling could choose
nothing else, and greedy output is the same token for token with jump-forward on or off. Text a
backend reports as forced (``GrammarMatcher.jump_forward``) is not retokenized and appended: the
model, choosing among every tokenization the mask allows, may split it differently (``":"`` as
``":`` then ``"``), and from there the context and the output drift. The row filled to find that
more than one token is allowed is kept and serves the next step's mask, so checking costs no
extra bitmask fill.
"""

from __future__ import annotations

import concurrent.futures
import time
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

import attrs
import torch

from pyagent_core.errors import ConstraintError, RequestError
from pyagent_core.interfaces.grammar import GrammarMatcher, TokenizerInfo, bitmask_shape
from pyagent_core.registry import Registry
from pyagent_engine.requests.structured_params import StructuredOutputParams
from pyagent_engine.requests.structured_report import StructuredReport
from pyagent_engine.structured.orchestrator import (
    CompiledConstraint,
    CompileTicket,
    GrammarOrchestrator,
    StructuredConfig,
)
from pyagent_kernels.grammar import apply_token_bitmask

if TYPE_CHECKING:
    from pyagent_engine.models.tokenizer import Tokenizer
    from pyagent_engine.requests.request import Request


@attrs.define
class RequestGrammar:
    """One admitted request's matcher and counters."""

    matcher: GrammarMatcher
    compiled: CompiledConstraint
    requested: str
    jump_forward_tokens: int = 0
    next_row: torch.Tensor | None = None
    """The bitmask row of the matcher's current state, when jump-forward filled it (cleared on every move)."""

    def report(self) -> StructuredReport:
        """This request's :class:`StructuredReport`."""
        c = self.compiled
        return StructuredReport(self.requested, c.backend, c.skipped, c.cache_hit, c.compile_s,
                                self.jump_forward_tokens, c.unenforced)


class StructuredOutputs:
    """Structured output for one engine: pending compiles, live matchers, the batch bitmask.

    Args:
        registry: where grammar backends come from.
        tokenizer: the model's tokenizer (its byte table is what grammar backends see).
        eos_token_ids: the model's end-of-sequence tokens.
        vocab_size: the model's logits width.
        config: fallback order, cache, limits, jump-forward.

    The tokenizer's byte table and the orchestrator are built on the first constrained request.
    """

    def __init__(self, registry: Registry, tokenizer: Tokenizer, eos_token_ids: Sequence[int], vocab_size: int,
                 config: StructuredConfig | None = None) -> None:
        self.registry = registry
        self.tokenizer = tokenizer
        self.eos_token_ids = tuple(eos_token_ids)
        self.vocab_size = vocab_size
        self.config = config or StructuredConfig()
        self.pending: dict[str, tuple[Request, CompileTicket]] = {}
        self.active: dict[str, RequestGrammar] = {}
        self._orchestrator: GrammarOrchestrator | None = None
        self._bitmask = torch.empty(0, 0, dtype=torch.int32)
        self._failed: dict[str, str] = {}

    @property
    def orchestrator(self) -> GrammarOrchestrator:
        """The grammar orchestrator for the model's tokenizer (built on first use)."""
        if self._orchestrator is None:
            from pyagent_engine.models.grammar_vocab import grammar_tokenizer_info

            info = grammar_tokenizer_info(self.tokenizer, self.eos_token_ids, self.vocab_size)
            self._orchestrator = GrammarOrchestrator(self.registry, info, self.config)
        return self._orchestrator

    @property
    def tokenizer_info(self) -> TokenizerInfo:
        """The tokenizer as grammar backends see it."""
        return self.orchestrator.tokenizer_info

    # --- admission -------------------------------------------------------------------------------

    @staticmethod
    def params_of(request: Request) -> StructuredOutputParams | None:
        """The request's structured-output settings, if it has any."""
        structured: StructuredOutputParams | None = request.params.structured
        return structured

    def submit(self, request: Request) -> None:
        """Check the request's constraint (raising its :class:`ConstraintError`) and start compiling it."""
        params = self.params_of(request)
        assert params is not None
        if request.params.ignore_eos:
            raise RequestError("ignore_eos cannot be combined with a constraint: a constrained output ends "
                               "where the constraint ends; drop ignore_eos")
        self.pending[request.request_id] = (request, self.orchestrator.submit(params))

    def has_pending(self) -> bool:
        """True while some request waits for its grammar."""
        return bool(self.pending)

    def pending_requests(self) -> list[Request]:
        """The requests waiting for their grammar, in submission order."""
        return [request for request, _ in self.pending.values()]

    def poll(self, block: bool) -> tuple[list[Request], list[tuple[Request, ConstraintError]]]:
        """Requests whose grammar is ready (now matched) and requests whose compile failed.

        With ``block``, wait until at least one pending request is decided (the engine has
        nothing else to do).
        """
        if block and self.pending:
            tickets = [ticket for _, ticket in self.pending.values()]
            timeout = max(0.0, min(t.deadline for t in tickets) - time.monotonic())
            concurrent.futures.wait([t.future for t in tickets], timeout,
                                    return_when=concurrent.futures.FIRST_COMPLETED)
        ready, failed = [], []
        for request_id, (request, ticket) in list(self.pending.items()):
            try:
                compiled = ticket.poll()
            except ConstraintError as exc:
                failed.append((request, exc))
                del self.pending[request_id]
                continue
            if compiled is None:
                continue
            del self.pending[request_id]
            params = self.params_of(request)
            assert params is not None
            self.active[request_id] = RequestGrammar(compiled.grammar.matcher(), compiled, params.backend)
            ready.append(request)
        return ready, failed

    # --- each step -------------------------------------------------------------------------------

    def apply_masks(self, requests: Sequence[Request], logits: torch.Tensor, rows: Sequence[int] | None = None) -> None:
        """Mask ``logits`` with each constrained request's bitmask: ``requests[i]``'s row is
        ``rows[i]`` (default ``i``; other rows, such as draft rows, are left as they are).

        A constrained request whose matcher raises, or whose grammar allows no token at all, keeps its
        row unmasked (so that sampling the batch still works) and :meth:`accept` then fails it alone.
        """
        rows = range(len(requests)) if rows is None else rows
        constrained = [i for i, r in enumerate(requests) if r.request_id in self.active]
        self._failed = {}
        if not constrained:
            return
        shape = bitmask_shape(logits.shape[0], logits.shape[-1])
        if self._bitmask.shape[0] < shape[0] or self._bitmask.shape[1] != shape[1]:
            self._bitmask = torch.full((max(shape[0], 2 * self._bitmask.shape[0]), shape[1]), -1, dtype=torch.int32)
        bitmask = self._bitmask[: shape[0]]
        for i in constrained:
            request, row = requests[i], rows[i]
            state = self.active[request.request_id]
            try:
                if state.next_row is not None and state.next_row.shape[0] == shape[1]:
                    bitmask[row] = state.next_row
                else:
                    state.matcher.fill_bitmask(bitmask, row)
            except Exception as exc:  # one backend failing on one request must not stop the batch
                bitmask[row] = 0
                self._failed[request.request_id] = self._failure(request, "fill_bitmask", exc)
        index = torch.tensor([rows[i] for i in constrained], dtype=torch.long)
        alive = bitmask.index_select(0, index).any(dim=1).tolist()
        if not all(alive):
            for i, ok in zip(constrained, alive, strict=True):
                request = requests[i]
                if not ok and request.request_id not in self._failed:
                    self._failed[request.request_id] = (
                        f"the constraint allows no token after {len(request.output_token_ids)} output tokens (grammar "
                        f"backend {self.active[request.request_id].compiled.backend!r} reached a dead end); check "
                        "the constraint or try another backend")
            index = torch.tensor([rows[i] for i, ok in zip(constrained, alive, strict=True) if ok], dtype=torch.long)
        if len(index):
            apply_token_bitmask(logits, bitmask, index)

    def _failure(self, request: Request, call: str, exc: Exception) -> str:
        backend = self.active[request.request_id].compiled.backend
        return (f"grammar backend {backend!r} failed in {call} after {len(request.output_token_ids)} output tokens: "
                f"{type(exc).__name__}: {exc}; try another backend")

    def accept(self, request: Request, token: int) -> str | None:
        """Feed the sampled ``token`` to the request's matcher; ``None``, or why the request must fail."""
        state = self.active.get(request.request_id)
        if state is None:
            return None
        failed = self._failed.get(request.request_id)
        if failed is not None:
            return failed
        state.next_row = None
        try:
            accepted = state.matcher.accept_token(token)
        except Exception as exc:  # a backend bug fails this request only
            return self._failure(request, "accept_token", exc)
        if not accepted:
            return (f"grammar backend {state.compiled.backend!r} refused token {token}, which its bitmask allowed; "
                    "this is a bug of that backend, try another one")
        return None

    def jump_forward(self, request: Request) -> Iterator[int]:
        """The tokens the grammar forces next, each accepted into the matcher and counted as it is yielded.

        A token is forced while it is the only one the grammar allows (see the module doc); the first
        state that allows several tokens (or none) ends the run and its row is kept for the next
        step's mask. Lazy: the engine stops pulling once the request finishes, and nothing past the
        last token it appended is accepted. Nothing is forced when jump-forward is off.
        """
        state = self.active.get(request.request_id)
        if state is None or not self.config.jump_forward:
            return
        while True:
            row = torch.zeros(bitmask_shape(1, self.vocab_size), dtype=torch.int32)
            try:
                state.matcher.fill_bitmask(row, 0)
                token = only_allowed(row[0])
                if token is None:
                    state.next_row = row[0]
                    return
                if not state.matcher.accept_token(token):
                    return
            except Exception:  # jump-forward only saves forward passes: the next mask (filled and
                return  # checked by apply_masks) judges whether the backend still works
            state.jump_forward_tokens += 1
            yield token

    # --- speculative decoding --------------------------------------------------------------------

    def can_rollback(self, request: Request) -> bool:
        """Whether the request's backend can undo accepted tokens (``True`` when unconstrained)."""
        state = self.active.get(request.request_id)
        return state is None or state.compiled.spec.rollback

    def rollback(self, request: Request, num_tokens: int) -> None:
        """Undo the last ``num_tokens`` tokens accepted into the request's matcher (rejected drafts).

        No-op for unconstrained requests. Raises ``ValueError`` when fewer tokens were accepted and
        :class:`RequestError` when the request's backend cannot roll back (see :meth:`can_rollback`).
        """
        state = self.active.get(request.request_id)
        if state is None or num_tokens == 0:
            return
        if not state.compiled.spec.rollback:
            raise RequestError(f"grammar backend {state.compiled.backend!r} cannot roll back tokens; "
                               "use a backend with rollback (xgrammar) for speculative decoding")
        state.next_row = None
        state.matcher.rollback(num_tokens)

    def draft_bitmask(self, request: Request, draft: Sequence[int]) -> torch.Tensor:
        """Bitmask rows for verifying ``draft``: row ``i`` allows the tokens that may follow ``draft[:i]``.

        ``len(draft) + 1`` rows; rows past the first draft token the grammar refuses allow nothing.
        The matcher's state is unchanged afterwards (the walk is rolled back).
        """
        state = self.active.get(request.request_id)
        rows = torch.full(bitmask_shape(len(draft) + 1, self.vocab_size), -1, dtype=torch.int32)
        if state is None:
            return rows
        rows.zero_()
        accepted = 0
        for row in range(len(draft) + 1):
            state.matcher.fill_bitmask(rows, row)
            if row == len(draft) or not state.matcher.accept_token(draft[row]):
                break
            accepted += 1
        self.rollback(request, accepted)
        return rows

    # --- reporting and cleanup -------------------------------------------------------------------

    def report(self, request: Request) -> StructuredReport | None:
        """How structured output serves ``request`` (``None`` when it has no constraint)."""
        state = self.active.get(request.request_id)
        if state is not None:
            return state.report()
        params = self.params_of(request)
        return None if params is None else StructuredReport(params.backend)

    def release(self, request: Request) -> None:
        """Forget the request (finished or aborted), whether compiling or running."""
        self.pending.pop(request.request_id, None)
        self.active.pop(request.request_id, None)

    def close(self) -> None:
        """Stop the compile pool."""
        if self._orchestrator is not None:
            self._orchestrator.close()


def only_allowed(row: torch.Tensor) -> int | None:
    """The token id whose bit is the only one set in the bitmask ``row`` (``int32 [words]``), else ``None``."""
    words = row.nonzero()
    if len(words) != 1:
        return None
    index = int(words[0, 0])
    word = int(row[index]) & 0xFFFFFFFF
    if word & (word - 1):
        return None
    return index * 32 + word.bit_length() - 1
