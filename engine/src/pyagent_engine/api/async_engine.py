"""The engine loop on its own thread, fed from asyncio: submit requests, stream their outputs, abort them.

:class:`AsyncEngine` runs the steps of an :class:`~pyagent_engine.api.llm.LLM`'s engine on one thread.
Coroutines submit a group of requests (the ``n`` choices of one HTTP call) with
:meth:`AsyncEngine.generate` and read a :class:`Generation`: every output (deltas and finals) of its
requests in arrival order, delivered through an asyncio queue. Adding and aborting run on the engine
thread between steps, so the event loop never waits for a step; each request goes through a
:class:`~pyagent_engine.api.shared_engine.Session` of the LLM's shared engine, so other callers of the
same LLM (``generate`` from another thread) keep working.

Limits: at most ``max_waiting`` requests wait to start and ``max_concurrent`` are in the engine at
once; more raise :class:`EngineOverloadedError`. A generation whose reader stops (a client that
disconnects cancels it), or that runs past its timeout, is aborted at once and its KV blocks go back
to the pool before the next step. :meth:`AsyncEngine.drain` (on SIGTERM) and :meth:`AsyncEngine.shutdown`
refuse new work, let the running requests finish within a grace period and abort the rest.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncGenerator, Callable, Sequence
from typing import TypeVar

import attrs

from pyagent_core.errors import PyagentError, RequestError
from pyagent_engine.api.llm import LLM
from pyagent_engine.api.shared_engine import Session
from pyagent_engine.core.engine import Engine
from pyagent_engine.requests.lora import LoRARequest
from pyagent_engine.requests.params import SamplingParams
from pyagent_engine.requests.request import RequestOutput

T = TypeVar("T")


class EngineOverloadedError(PyagentError):
    """The waiting queue (or the cap on requests in the engine) is full, or the engine is shutting down."""


@attrs.frozen
class EngineLoad:
    """The engine's state after its latest step.

    Attributes:
        running: requests in the running batch.
        waiting: requests waiting to start (for the scheduler or for their grammar).
        kv_blocks_free: KV-cache blocks free for new work (cached blocks that may be evicted count as free).
        kv_blocks_total: KV-cache blocks of the engine.
        state_slots_free: recurrent-state slots not held by a running request (models with state layers).
        state_slots_total: recurrent-state slots of the engine (0 for a model without state layers).
    """

    running: int = 0
    waiting: int = 0
    kv_blocks_free: int = 0
    kv_blocks_total: int = 0
    state_slots_free: int = 0
    state_slots_total: int = 0


@attrs.frozen
class Submission:
    """One request of a generation: its prompt token ids, prompt text (if any), sampling parameters and
    LoRA adapter (``None``: the base model)."""

    prompt_token_ids: Sequence[int]
    params: SamplingParams
    prompt: str | None = None
    lora_request: LoRARequest | None = None


class Generation:
    """The requests of one call and their outputs (see :meth:`outputs`)."""

    def __init__(self, engine: AsyncEngine, session: Session, request_ids: list[str], timeout_s: float | None) -> None:
        self.request_ids = request_ids
        self._engine = engine
        self._session = session
        self._index = {request_id: i for i, request_id in enumerate(request_ids)}
        self.queue: asyncio.Queue[RequestOutput] = asyncio.Queue()
        self._deadline = None if timeout_s is None else time.monotonic() + timeout_s
        self._open = len(request_ids)

    async def outputs(self) -> AsyncGenerator[tuple[int, RequestOutput], None]:
        """``(index, output)`` pairs as outputs arrive; ``index`` is the position of the output's request in
        the submitted list. They end when every request has finished; leaving early (an exception, a
        cancelled task, a timeout, closing the generator) aborts the requests still running.

        Raises:
            TimeoutError: the engine's request timeout passed.
        """
        try:
            while self._open:
                output = await self._next()
                if output.finished:
                    self._open -= 1
                yield self._index[output.request_id], output
        finally:
            if self._open:
                self._engine.abort(self)

    async def _next(self) -> RequestOutput:
        if self._deadline is None:
            return await self.queue.get()
        remaining = self._deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError
        return await asyncio.wait_for(self.queue.get(), remaining)


class AsyncEngine:
    """The engine of ``llm`` stepping on its own thread (see the module docstring).

    Args:
        llm: the model and engine; closed by :meth:`shutdown`.
        max_waiting: the most requests waiting to start; more are refused.
        max_concurrent: the most requests in the engine at once, running and waiting (0: no cap).
        timeout_s: the longest a generation may run before it is aborted (``None``: no limit).
    """

    def __init__(self, llm: LLM, *, max_waiting: int = 256, max_concurrent: int = 0,
                 timeout_s: float | None = None) -> None:
        self.llm = llm
        self.max_waiting = max_waiting
        self.max_concurrent = max_concurrent
        self.timeout_s = timeout_s
        self.draining = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._cond = threading.Condition()
        self._inbox: list[Callable[[], None]] = []
        self._active: dict[Session, Generation] = {}
        self._queued = 0  # requests handed to the thread, not yet added
        self._measure(llm.engine)  # nothing runs yet: every block and state slot is free
        self._stop = False
        self._thread = threading.Thread(target=self._run, name="pyagent-engine", daemon=True)

    def start(self) -> None:
        """Start the engine thread; call from the event loop that will read the generations."""
        self._loop = asyncio.get_running_loop()
        self._thread.start()

    @property
    def load(self) -> EngineLoad:
        """The engine's state after its latest step (or abort)."""
        return self._load

    @property
    def num_active(self) -> int:
        """Requests submitted and not finished (waiting, running, or not yet handed to the engine)."""
        return self._queued + self._load.running + self._load.waiting

    async def generate(self, submissions: Sequence[Submission]) -> Generation:
        """Add ``submissions`` to the engine; their outputs arrive through the returned :class:`Generation`.

        Raises:
            EngineOverloadedError: the engine is shutting down, the waiting queue is full, or the cap
                on requests in the engine is reached.
            RequestError: more requests than the waiting queue or the cap could ever hold, or a
                request cannot run (bad parameters, a prompt too long...); none of them is kept.
        """
        count = len(submissions)
        for limit, what in ((self.max_waiting, "the waiting queue holds"), (self.max_concurrent, "the engine takes")):
            if limit and count > limit:
                raise RequestError(f"this call asks for {count} requests (prompts times n) but {what} at most "
                                   f"{limit}; send fewer at a time")
        if self.draining:
            raise EngineOverloadedError("the server is shutting down and takes no new requests")
        if self._queued + self._load.waiting + count > self.max_waiting:
            raise EngineOverloadedError(f"the waiting queue is full ({self.max_waiting} requests); retry later")
        if self.max_concurrent and self.num_active + count > self.max_concurrent:
            raise EngineOverloadedError(f"the server runs its most requests at once ({self.max_concurrent}); "
                                        "retry later")
        assert self._loop is not None, "start() the AsyncEngine first"
        done: asyncio.Future[Generation] = self._loop.create_future()
        self._queued += count
        self._send(lambda: self._add(submissions, done))
        try:
            return await done
        finally:
            self._queued -= count

    async def call(self, function: Callable[[Engine], T]) -> T:
        """Run ``function(engine)`` on the engine thread between two steps; its result, or its exception
        raised here (LoRA adapters are loaded and unloaded so, never during a step)."""
        assert self._loop is not None, "start() the AsyncEngine first"
        done: asyncio.Future[T] = self._loop.create_future()

        def command() -> None:
            try:
                result = function(self.llm.engine)
            except Exception as error:
                self._call(done.set_exception, error)
            else:
                self._call(done.set_result, result)

        self._send(command)
        return await done

    def abort(self, generation: Generation) -> None:
        """Abort the unfinished requests of ``generation`` before the next step."""
        self._send(lambda: self._close(generation._session))

    def drain(self, grace_s: float) -> None:
        """Refuse new requests from now on and abort those still in the engine after ``grace_s`` seconds;
        their readers get final outputs with ``finish_reason == "abort"``. Safe to call from a signal
        handler on the event loop's thread."""
        self.draining = True
        assert self._loop is not None
        self._loop.call_soon_threadsafe(self._loop.call_later, grace_s, self._send, self._abort_all)

    async def shutdown(self, grace_s: float) -> None:
        """Refuse new requests, wait up to ``grace_s`` seconds for those in the engine, abort the rest,
        close the engine and stop the thread."""
        self.draining = True
        deadline = time.monotonic() + grace_s
        while self._active and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        with self._cond:
            self._stop = True
            self._cond.notify()
        await asyncio.to_thread(self._thread.join)

    # --- the engine thread ---------------------------------------------------------------------

    def _send(self, command: Callable[[], None]) -> None:
        with self._cond:
            self._inbox.append(command)
            self._cond.notify()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not (self._inbox or self._active or self._stop):
                    self._cond.wait()
                commands, self._inbox = self._inbox, []
                stop = self._stop
            for command in commands:
                command()
            if stop:  # the requests left end with finish_reason "abort", delivered to their readers
                self.llm.close()
                for session, generation in self._active.items():
                    self._deliver(session, generation)
                self._active.clear()
                return
            self._step()

    def _add(self, submissions: Sequence[Submission], done: asyncio.Future[Generation]) -> None:
        session = self.llm.shared.session()
        try:
            request_ids = [session.new_id() for _ in submissions]
            for request_id, submission in zip(request_ids, submissions, strict=True):
                session.add(request_id, submission.prompt_token_ids, submission.params, submission.prompt,
                            submission.lora_request)
        except Exception as error:
            session.close()
            self._call(done.set_exception, error)
            return
        generation = Generation(self, session, request_ids, self.timeout_s)
        self._active[session] = generation
        self._call(done.set_result, generation)

    def _abort_all(self) -> None:
        for session, generation in self._active.items():
            session.abort()
            self._deliver(session, generation)
        self._active.clear()
        with self.llm.shared.locked() as engine:
            self._measure(engine)

    def _close(self, session: Session) -> None:
        self._active.pop(session, None)
        session.close()
        with self.llm.shared.locked() as engine:
            self._measure(engine)

    def _step(self) -> None:
        shared = self.llm.shared
        with shared.locked() as engine:
            if engine.has_unfinished():
                shared.step()
            self._measure(engine)
        for session, generation in list(self._active.items()):
            self._deliver(session, generation)
            if session.finished:
                del self._active[session]

    def _deliver(self, session: Session, generation: Generation) -> None:
        outputs = session.ready()
        if outputs:
            self._call(_put_all, generation.queue, outputs)

    def _measure(self, engine: Engine) -> None:
        scheduler = engine.scheduler
        self._load = EngineLoad(
            running=len(scheduler.running), waiting=len(scheduler.waiting) + len(engine.structured.pending),
            kv_blocks_free=engine.kv.num_free, kv_blocks_total=engine.num_blocks,
            state_slots_free=engine.kv.num_free_slots, state_slots_total=engine.kv.num_slots)

    def _call(self, callback: Callable[..., object], *args: object) -> None:
        assert self._loop is not None
        if not self._loop.is_closed():
            self._loop.call_soon_threadsafe(callback, *args)


def _put_all(queue: asyncio.Queue[RequestOutput], outputs: list[RequestOutput]) -> None:
    for output in outputs:
        queue.put_nowait(output)
