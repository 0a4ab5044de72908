"""Stage 1, schedule: admit the requests whose grammar is ready, draft for the decoding ones, plan the step."""

from __future__ import annotations

from pyagent_engine.requests.request import Request
from pyagent_engine.scheduling.scheduler import Scheduler
from pyagent_engine.spec.decoder import SpeculativeDecoder
from pyagent_engine.stages.records import ScheduledBatch
from pyagent_engine.structured.runtime import StructuredOutputs


class Schedule:
    """Decides what the step computes.

    Requests whose grammar finished compiling join the scheduler's queue (a compile is waited for
    only when nothing else can run; one that failed or timed out ends its request); with
    speculative decoding, the proposer drafts for every running request that decodes and has no
    grammar; then the scheduler plans the step (:meth:`Scheduler.schedule`), asking the KV manager
    for blocks. When it plans nothing, the first waiting request cannot get the blocks it needs and
    ends, so the others are not stuck behind it.

    Args:
        scheduler: the scheduler (queues, token budget, preemption).
        structured: structured output (requests waiting for their grammar).
        speculative: the speculative decoder, or ``None`` without speculation.
        max_model_len: the model's context length (drafts stop short of it).
    """

    def __init__(self, scheduler: Scheduler, structured: StructuredOutputs, speculative: SpeculativeDecoder | None,
                 max_model_len: int) -> None:
        self.scheduler = scheduler
        self.structured = structured
        self.speculative = speculative
        self.max_model_len = max_model_len

    def run(self) -> ScheduledBatch:
        """Plan one step."""
        failed: list[tuple[Request, str]] = []
        if self.structured.has_pending():
            ready, compile_failed = self.structured.poll(block=not self.scheduler.has_work())
            for request in ready:
                self.scheduler.add(request)
            failed += [(request, str(error)) for request, error in compile_failed]
        if self.speculative is not None:  # grammar-constrained requests are not drafted for
            self.speculative.propose([r for r in self.scheduler.running if self.structured.params_of(r) is None],
                                     self.max_model_len)
        plan = self.scheduler.schedule()
        if not plan.chunks:
            failed += [(request, "no KV blocks free for it") for request in list(self.scheduler.waiting)[:1]]
        return ScheduledBatch(plan, tuple(failed))
