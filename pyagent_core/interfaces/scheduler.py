"""Scheduling-policy interface: which waiting request is admitted next, and which running one gives way.

Each step the host (an engine's scheduler) builds a :class:`SchedulerState`: a read-only
:class:`RequestView` of every waiting and running request, the clock, and the KV blocks free. It asks
the policy for :meth:`SchedulingPolicy.order`, the waiting requests' ids in the order to admit them,
and admits from the front while its token budget, sequence limit and free blocks allow (a request
that does not fit stops admission for the step, so the order is also a promise of who goes next).
When a running request needs a KV block and none is free, the host asks
:meth:`SchedulingPolicy.victim` for a running request to preempt (its blocks are freed and it is
recomputed later), and asks again with a new state until the request fits.

A policy decides from what the states tell it and from what it remembers of earlier states: it never
reads a clock of its own (``state.now`` is the time) and draws no unseeded random numbers, so a
history of states replays to the same decisions. :meth:`SchedulingPolicy.finished` tells it that a
request has left for good (finished, failed or aborted), with its last view; a policy that keeps
accounts per request (service per tenant, say) settles them there and forgets the id.

A policy is built as ``cls(options, context)``: its validated options and a :class:`SchedulerContext`
(the pool's size and block size, the step's token budget and sequence limit). A wrong answer (an
order that is not a permutation of the waiting ids, a victim that is not running) is the host's to
catch; pyagent's engine then uses :func:`fcfs_order` and :func:`last_admitted` for that step with a
warning, as it does when a policy raises.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from typing import Any

import attrs


@attrs.frozen(kw_only=True)
class RequestView:
    """What a policy may know about one request; times are seconds on the host's clock (``state.now``).

    Attributes:
        request_id: unique among the requests of a state.
        arrival_time: when the request was added.
        priority: smaller is more urgent (``0`` by default; may be negative).
        deadline: when the request should have its first token (``arrival_time`` plus the request's
            ``deadline_s``); ``None`` when it has none.
        tenant: who sent it (``None``: the anonymous tenant).
        prompt_tokens: tokens of its prompt.
        output_tokens: tokens it has generated so far.
        max_tokens: the most tokens it may generate.
        cached_tokens: prompt tokens a prefix cache holds for it now (0 when the host has no prefix
            cache or the policy's spec does not ask for them, see ``SchedulerSpec.uses_cached_prefix``).
        served_tokens: tokens the host has computed for it so far (prompt chunks and decoded
            tokens, recomputation after a preemption included): the service it has had.
        num_preemptions: how often it was preempted.
    """

    request_id: str
    arrival_time: float
    priority: int = 0
    deadline: float | None = None
    tenant: str | None = None
    prompt_tokens: int = 1
    output_tokens: int = 0
    max_tokens: int = 1
    cached_tokens: int = 0
    served_tokens: int = 0
    num_preemptions: int = 0


@attrs.frozen(kw_only=True)
class SchedulerState:
    """The host's queues at one decision.

    Attributes:
        now: the current time, on the clock of the views' times.
        waiting: the waiting requests, in the host's queue order (arrival order, preempted requests first).
        running: the running requests, in the order they were admitted (the last is the newest).
        free_blocks: KV blocks free (cached blocks nobody uses count as free).
        total_blocks: KV blocks of the pool.
    """

    now: float
    waiting: tuple[RequestView, ...] = ()
    running: tuple[RequestView, ...] = ()
    free_blocks: int = 0
    total_blocks: int = 0


def _positive(instance: object, attribute: attrs.Attribute[int], value: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise ValueError(f"{attribute.name} must be a positive integer, got {value!r}")


@attrs.frozen
class SchedulerContext:
    """What the host tells a scheduling policy about itself."""

    num_blocks: int = attrs.field(validator=_positive)
    """KV blocks of the pool."""
    block_size: int = attrs.field(validator=_positive)
    """Tokens a KV block holds."""
    max_num_seqs: int = attrs.field(validator=_positive)
    """The most requests running at once."""
    max_num_batched_tokens: int = attrs.field(validator=_positive)
    """Tokens computed in one step (prefill chunks plus decodes)."""


def fcfs_order(state: SchedulerState) -> list[str]:
    """First come, first served: the waiting ids by arrival time (ties: the host's queue order)."""
    return [view.request_id for view in sorted(state.waiting, key=lambda view: view.arrival_time)]


def last_admitted(state: SchedulerState) -> str:
    """The running request admitted last: the victim of first come, first served (and vLLM's default)."""
    return state.running[-1].request_id


class SchedulingPolicy(ABC):
    """Orders the waiting requests each step and picks a running request to preempt.

    Args:
        options: the policy's validated options (defaults filled in).
        context: the host it schedules for.
    """

    def __init__(self, options: Mapping[str, Any], context: SchedulerContext) -> None:
        self.options = dict(options)
        self.context = context

    @classmethod  # noqa: B027 - optional hook
    def check_available(cls) -> None:
        """Raise with a reason if this policy cannot run here (deep check, ``--check``)."""

    @abstractmethod
    def order(self, state: SchedulerState) -> Sequence[str]:
        """The ids of ``state.waiting``, each once, in the order to admit them."""

    def victim(self, state: SchedulerState) -> str:
        """The id of a request of ``state.running`` (never empty) to preempt; by default the last admitted."""
        return last_admitted(state)

    def finished(self, view: RequestView) -> None:  # noqa: B027 - optional hook
        """``view``'s request has left for good; forget it. The default keeps nothing per request."""
