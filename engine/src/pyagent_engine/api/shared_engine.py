"""One engine shared by threads and by interleaved streams, each reading the outputs of its own requests.

:class:`SharedEngine` serialises every use of an :class:`~pyagent_engine.core.engine.Engine` behind one
lock. A caller opens a :class:`Session`, adds requests through it and reads their outputs. A caller
that needs an output that has not arrived runs one engine step (under the lock) for every request
in the engine, and queues the outputs of other sessions' requests for them: nobody owns the loop,
every session makes progress, and nothing else touches the engine while a step runs. A session
that is closed (or a stream generator dropped) before its requests finish aborts them, so their
KV blocks go back to the pool.
"""

from __future__ import annotations

import contextlib
import threading
from collections import deque
from collections.abc import Iterator, Sequence

from pyagent_engine.core.engine import Engine
from pyagent_engine.requests.lora import LoRARequest
from pyagent_engine.requests.params import SamplingParams
from pyagent_engine.requests.request import Request, RequestOutput


class SharedEngine:
    """The lock around ``engine`` and the output queue of every request added through a :class:`Session`."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._lock = threading.Lock()
        self._owner: int | None = None
        self._queues: dict[str, deque[RequestOutput]] = {}
        self._orphans: list[Request] = []

    @contextlib.contextmanager
    def locked(self) -> Iterator[Engine]:
        """Hold the engine for the ``with`` block.

        Raises :class:`RuntimeError` on the thread that holds it already (a hook that generates with
        the engine it was called from), which would otherwise wait for itself forever.
        """
        if self._owner == threading.get_ident():
            raise RuntimeError("this LLM's engine is busy on this thread already (a hook or sampler calling "
                               "generate/stream on the engine that called it); use another LLM, or another thread")
        with self._lock:
            self._owner = threading.get_ident()
            try:
                yield self.engine
            finally:
                self._owner = None

    def session(self) -> Session:
        """A new session over this engine (use it in a ``with`` block, or close it)."""
        return Session(self)

    def step(self) -> None:
        """Run one engine step and queue each output for its session; the lock must be held."""
        for request in self._orphans:
            self._abort(request)
        self._orphans.clear()
        outputs = self.engine.step()
        self._deliver(outputs)
        if not outputs and not self.engine.has_unfinished() and self._queues:
            raise RuntimeError(f"the engine has no work left but requests {sorted(self._queues)} never finished")

    def close(self) -> None:
        """Close the engine; the requests still running end with ``finish_reason == "abort"``."""
        with self.locked() as engine:
            self._deliver(engine.close())

    def _deliver(self, outputs: list[RequestOutput]) -> None:
        for output in outputs:
            queue = self._queues.get(output.request_id)
            if queue is not None:
                queue.append(output)
                if output.finished:
                    del self._queues[output.request_id]

    def _abort(self, request: Request) -> None:
        if not request.finished:
            self.engine.abort(request)
        self._queues.pop(request.request_id, None)

    def release(self, requests: Sequence[Request]) -> None:
        """Abort ``requests`` where unfinished and forget their queues.

        Called from a generator being finalised while this thread runs a step (the garbage collector
        can do that), it leaves them to the start of the next step instead.
        """
        if self._owner == threading.get_ident():
            self._orphans.extend(requests)
            return
        with self.locked():
            for request in requests:
                self._abort(request)


class Session:
    """Requests added by one caller (a ``generate`` call, a stream) and their outputs, in arrival order."""

    def __init__(self, shared: SharedEngine) -> None:
        self.shared = shared
        self.request_ids: list[str] = []
        self._queue: deque[RequestOutput] = deque()
        self._unfinished: dict[str, Request] = {}

    def new_id(self) -> str:
        """Reserve the next request id of the engine for this session."""
        with self.shared.locked() as engine:
            request_id = engine.next_request_id()
        self.request_ids.append(request_id)
        return request_id

    def add(self, request_id: str, prompt_token_ids: Sequence[int], params: SamplingParams,
            prompt: str | None, lora_request: LoRARequest | None = None) -> None:
        """Queue a request in the engine (with the LoRA adapter of ``lora_request``); raises
        :class:`~pyagent_core.errors.RequestError` when it cannot run."""
        with self.shared.locked() as engine:
            request = engine.add_request(prompt_token_ids, params, prompt=prompt, request_id=request_id,
                                         lora_request=lora_request)
            self.shared._queues[request_id] = self._queue
            self._unfinished[request_id] = request

    def __iter__(self) -> Iterator[RequestOutput]:
        """Outputs of this session's requests (deltas and finals) until every one has finished."""
        while self._unfinished:
            with self.shared.locked():
                while not self._queue:
                    self.shared.step()
                output = self._pop()
            yield output

    def _pop(self) -> RequestOutput:
        output = self._queue.popleft()
        if output.finished:
            self._unfinished.pop(output.request_id, None)
        return output

    def ready(self) -> list[RequestOutput]:
        """The outputs that have arrived for this session's requests, without stepping the engine (for a
        caller that runs the steps itself, such as :mod:`pyagent_engine.api.async_engine`)."""
        return [self._pop() for _ in range(len(self._queue))]

    @property
    def finished(self) -> bool:
        """True once every request added through this session has finished (or none was added)."""
        return not self._unfinished

    def abort(self) -> None:
        """Abort this session's unfinished requests now; their final outputs (``finish_reason == "abort"``)
        join its queue, for :meth:`ready` (:meth:`close` aborts without outputs)."""
        with self.shared.locked() as engine:
            self.shared._deliver([engine.abort(r) for r in self._unfinished.values() if not r.finished])

    def close(self) -> None:
        """Abort this session's unfinished requests (their blocks go back to the pool)."""
        if self._unfinished:
            self.shared.release(list(self._unfinished.values()))
            self._unfinished.clear()

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
