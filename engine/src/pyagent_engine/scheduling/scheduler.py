"""Continuous batching: which requests run this step, how many tokens each, and who gets preempted.

Each step has a token budget. Running requests that are decoding go first (one token each), then
running requests part-way through their prompt (chunked prefill), then waiting requests in arrival
order while the budget, the sequence limit and the free KV blocks allow. When a running request
needs a block and none is free, the most recently admitted running request is preempted: its blocks
are freed and it goes back to the front of the waiting queue, to be recomputed later (prompt and
the outputs it already has), so nothing is lost.

Blocks come from the KV manager (:mod:`pyagent_engine.kv.manager`), the only code that allocates
or frees them. With prefix caching, a request being admitted first takes the cached blocks of its
longest cached prefix and computes only the rest; running requests publish their full blocks at the
start of each step and when they release their blocks (finished or preempted, so a preempted request
usually finds its own blocks again).

Which waiting request goes first and which running request gives way are the scheduling policy's
choice (a plugin, see :mod:`pyagent_engine.scheduling.policy`): each step the waiting queue is put in the
policy's order before admission, and each preemption takes the policy's victim. Without a policy,
first come, first served: arrival order, and the most recently admitted request is preempted.

A request with a LoRA adapter is admitted only when its adapter has a slot of the model
(:mod:`pyagent_engine.scheduling.lora_slots`); until then it keeps its place in the queue and the
requests behind it may go first. Running requests pin their slots; finishing or preemption unpins.
"""

from __future__ import annotations

import time
from collections import deque

import attrs

from pyagent_core.interfaces.scheduler import SchedulerState
from pyagent_engine.kv.manager import KVCacheManager
from pyagent_engine.requests.request import Request, RequestStatus
from pyagent_engine.scheduling.lora_slots import LoRASlotTable
from pyagent_engine.scheduling.policy import GuardedPolicy, request_view, state_of


@attrs.frozen
class ScheduledChunk:
    """``num_tokens`` new tokens of ``request`` computed this step; ``sample``: a token is drawn after."""

    request: Request
    num_tokens: int
    sample: bool


@attrs.frozen
class SchedulerOutput:
    """The step's chunks (in batch order), the requests preempted while scheduling it, and the
    tokens that requests admitted this step found in the prefix cache."""

    chunks: tuple[ScheduledChunk, ...]
    preempted: tuple[Request, ...]
    num_cached_tokens: int = 0

    @property
    def num_tokens(self) -> int:
        """Tokens computed this step."""
        return sum(c.num_tokens for c in self.chunks)


class Scheduler:
    """Decides each step's work; owns the waiting queue and the running list, and asks ``kv`` for blocks.

    Args:
        kv: the KV manager that allocates and frees the requests' blocks.
        max_num_seqs: the most requests running at once.
        max_num_batched_tokens: the token budget of one step.
        policy: the scheduling policy (default: first come, first served).
        lora_slots: the model's LoRA slots (``None``: LoRA is off, every request runs the base model).
    """

    def __init__(self, kv: KVCacheManager, max_num_seqs: int, max_num_batched_tokens: int,
                 policy: GuardedPolicy | None = None, lora_slots: LoRASlotTable | None = None) -> None:
        if max_num_batched_tokens < max_num_seqs:
            raise ValueError(
                f"max_num_batched_tokens ({max_num_batched_tokens}) must be >= max_num_seqs ({max_num_seqs}) "
                "so every running request can decode each step"
            )
        self.policy = policy or GuardedPolicy(None, "fcfs")
        if self.policy.uses_cached_prefix and kv.prefix_cache is None:
            raise ValueError(f"scheduling policy {self.policy.name!r} orders by cached prefix: it needs a "
                             "prefix-caching pool")
        self.kv = kv
        self.max_num_seqs = max_num_seqs
        self.max_num_batched_tokens = max_num_batched_tokens
        self.lora_slots = lora_slots
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []

    def add(self, request: Request) -> None:
        """Queue ``request``."""
        self.waiting.append(request)

    def has_work(self) -> bool:
        """True while any request waits or runs."""
        return bool(self.waiting or self.running)

    def finish(self, request: Request) -> None:
        """Take a finished request out of the running list (or the queue), free its blocks, tell the policy."""
        if request in self.running:
            self.running.remove(request)
            self._unpin(request)
        elif request in self.waiting:
            self.waiting.remove(request)
        self.kv.release(request)
        self.policy.finished(request_view(request))

    def state(self, now: float) -> SchedulerState:
        """The queues as the policy sees them at ``now``."""
        ordered = self.policy.uses_cached_prefix
        waiting = (request_view(r, self.kv.match_length(r) if ordered else 0) for r in self.waiting)
        return state_of(now, waiting, self.running, self.kv.num_free, self.kv.num_blocks)

    def _order_waiting(self) -> None:
        """Put the waiting queue in the policy's order."""
        by_id = {request.request_id: request for request in self.waiting}
        self.waiting = deque(by_id[request_id] for request_id in self.policy.order(self.state(time.perf_counter())))

    def _victim(self) -> Request:
        """The running request the policy gives up."""
        victim = self.policy.victim(self.state(time.perf_counter()))
        return next(request for request in self.running if request.request_id == victim)

    @staticmethod
    def _draft_tokens(request: Request, room: int) -> int:
        """Draft nodes verified with ``request`` this step; a draft that does not fit ``room`` is dropped."""
        if request.draft is not None and len(request.draft) > room:
            request.draft = None
        return 0 if request.draft is None else len(request.draft)

    def _unpin(self, request: Request) -> None:
        if self.lora_slots is not None:
            self.lora_slots.release(request)

    def _preempt(self, request: Request) -> None:
        request.draft = None
        self.running.remove(request)
        self._unpin(request)
        self.kv.release(request)
        request.num_computed_tokens = 0
        request.num_preemptions += 1
        request.status = RequestStatus.WAITING
        self.waiting.appendleft(request)

    def schedule(self) -> SchedulerOutput:
        """Plan one step."""
        budget = self.max_num_batched_tokens
        chunks: list[ScheduledChunk] = []
        preempted: list[Request] = []
        cached = 0
        self.kv.publish(self.running)
        if self.waiting:
            self._order_waiting()
        decoding = [r for r in self.running if r.num_tokens - r.num_computed_tokens == 1]
        prefilling = [r for r in self.running if r.num_tokens - r.num_computed_tokens > 1]
        for request in decoding + prefilling:
            if request not in self.running or budget == 0:
                continue
            count = min(request.num_tokens - request.num_computed_tokens, budget)
            count += self._draft_tokens(request, budget - count)
            while not self.kv.grow(request, count):
                victim = self._victim()
                self._preempt(victim)
                preempted.append(victim)
                if victim is request:
                    break
            if request in self.running:
                budget -= count
                chunks.append(self._chunk(request, count))
        no_slot: list[Request] = []  # waiting for a LoRA slot: they keep their places
        while self.waiting and not preempted and budget > 0 and len(self.running) < self.max_num_seqs:
            request = self.waiting[0]
            if self.lora_slots is not None and not self.lora_slots.available(request):
                no_slot.append(self.waiting.popleft())
                continue
            hit = self.kv.acquire(request)
            count = min(request.num_tokens - request.num_computed_tokens, budget)
            if not self.kv.grow(request, count):
                self.kv.release(request)
                request.num_computed_tokens = 0
                break
            self.kv.count_admission(request, hit)
            cached += hit
            if not request.num_preemptions:
                request.num_cached_tokens = hit
            self.waiting.popleft()
            if request.scheduled_time is None:
                request.scheduled_time = time.perf_counter()
            request.status = RequestStatus.RUNNING
            if self.lora_slots is not None:
                self.lora_slots.acquire(request)
            self.running.append(request)
            budget -= count
            chunks.append(self._chunk(request, count))
        self.waiting.extendleft(reversed(no_slot))
        kept = tuple(c for c in chunks if c.request in self.running)
        for chunk in kept:
            chunk.request.num_served_tokens += chunk.num_tokens
        return SchedulerOutput(kept, tuple(preempted), cached)

    @staticmethod
    def _chunk(request: Request, count: int) -> ScheduledChunk:
        return ScheduledChunk(request, count, request.num_computed_tokens + count >= request.num_tokens)
