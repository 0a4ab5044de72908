"""Continuous batching: which requests run this step, how many tokens each, and who gets preempted.

Each step has a token budget. Running requests that are decoding go first (one token each), then
running requests part-way through their prompt (chunked prefill), then waiting requests in arrival
order while the budget, the sequence limit and the free KV blocks allow. When a running request
needs a block and none is free, the most recently admitted running request is preempted: its blocks
are freed and it goes back to the front of the waiting queue, to be recomputed later (prompt and
the outputs it already has), so nothing is lost.

With a prefix-caching pool, a request being admitted first takes the cached blocks of its longest
cached prefix and computes only the rest; running requests publish their full blocks at the start
of each step and when they release their blocks (finished or preempted, so a preempted request
usually finds its own blocks again). The ``prefix`` schedule admits the waiting request with the
longest cached prefix first (ties: arrival order) instead of first come, first served.
"""

from __future__ import annotations

from collections import deque

import attrs

from pyagent_engine.block_pool import BlockPool
from pyagent_engine.prefix_cache import SCHEDULES, PrefixCachingBlockPool
from pyagent_engine.request import Request, RequestStatus


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
    """Decides each step's work; owns the waiting queue, the running list and block allocation."""

    def __init__(self, pool: BlockPool, block_size: int, max_num_seqs: int, max_num_batched_tokens: int,
                 schedule: str = "fcfs") -> None:
        if max_num_batched_tokens < max_num_seqs:
            raise ValueError(
                f"max_num_batched_tokens ({max_num_batched_tokens}) must be >= max_num_seqs ({max_num_seqs}) "
                "so every running request can decode each step"
            )
        self.prefix_cache = pool if isinstance(pool, PrefixCachingBlockPool) else None
        if schedule not in SCHEDULES or (schedule == "prefix" and self.prefix_cache is None):
            raise ValueError(f"schedule {schedule!r} needs to be 'fcfs' or, with a prefix-caching pool, 'prefix'")
        self.schedule_policy = schedule
        self.pool = pool
        self.block_size = block_size
        self.max_num_seqs = max_num_seqs
        self.max_num_batched_tokens = max_num_batched_tokens
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []

    def add(self, request: Request) -> None:
        """Queue ``request``."""
        self.waiting.append(request)

    def has_work(self) -> bool:
        """True while any request waits or runs."""
        return bool(self.waiting or self.running)

    def finish(self, request: Request) -> None:
        """Take a finished request out of the running list (or the queue) and free its blocks."""
        if request in self.running:
            self.running.remove(request)
        elif request in self.waiting:
            self.waiting.remove(request)
        self._release(request)

    def _release(self, request: Request) -> None:
        if self.prefix_cache is not None:
            self.prefix_cache.release(request)
        else:
            self.pool.free(request.block_ids)
        request.block_ids = []

    def _grow(self, request: Request, num_tokens: int) -> bool:
        """Give ``request`` blocks for ``num_tokens`` more tokens; False when the pool is short."""
        total = request.num_computed_tokens + num_tokens
        missing = -(-total // self.block_size) - len(request.block_ids)
        if missing <= 0:
            return True
        blocks = self.pool.allocate(missing)
        if blocks is None:
            return False
        request.block_ids.extend(blocks)
        return True

    @staticmethod
    def _draft_tokens(request: Request, room: int) -> int:
        """Draft nodes verified with ``request`` this step; a draft that does not fit ``room`` is dropped."""
        if request.draft is not None and len(request.draft) > room:
            request.draft = None
        return 0 if request.draft is None else len(request.draft)

    def _preempt(self, request: Request) -> None:
        request.draft = None
        self.running.remove(request)
        self._release(request)
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
        cache = self.prefix_cache
        if cache is not None:
            for request in self.running:
                cache.publish(request)
            if self.schedule_policy == "prefix" and len(self.waiting) > 1:
                self.waiting = deque(sorted(self.waiting, key=lambda r: -cache.match_length(r)))
        decoding = [r for r in self.running if r.num_tokens - r.num_computed_tokens == 1]
        prefilling = [r for r in self.running if r.num_tokens - r.num_computed_tokens > 1]
        for request in decoding + prefilling:
            if request not in self.running or budget == 0:
                continue
            count = min(request.num_tokens - request.num_computed_tokens, budget)
            count += self._draft_tokens(request, budget - count)
            while not self._grow(request, count):
                victim = self.running[-1]
                self._preempt(victim)
                preempted.append(victim)
                if victim is request:
                    break
            if request in self.running:
                budget -= count
                chunks.append(self._chunk(request, count))
        while self.waiting and not preempted and budget > 0 and len(self.running) < self.max_num_seqs:
            request = self.waiting[0]
            hit = cache.acquire(request) if cache is not None else 0
            count = min(request.num_tokens - request.num_computed_tokens, budget)
            if not self._grow(request, count):
                self._release(request)
                request.num_computed_tokens = 0
                break
            if cache is not None:
                cache.stats.admitted(request.num_tokens, hit)
                cached += hit
                if not request.num_preemptions:
                    request.num_cached_tokens = hit
            self.waiting.popleft()
            request.status = RequestStatus.RUNNING
            self.running.append(request)
            budget -= count
            chunks.append(self._chunk(request, count))
        kept = tuple(c for c in chunks if c.request in self.running)
        return SchedulerOutput(kept, tuple(preempted), cached)

    @staticmethod
    def _chunk(request: Request, count: int) -> ScheduledChunk:
        return ScheduledChunk(request, count, request.num_computed_tokens + count >= request.num_tokens)
