"""Server-sent events and the two ways a route reads a :class:`~pyagent_engine.api.async_engine.Generation`.

A stream is ``data: {json}`` events ending with ``data: [DONE]``; a failure after the stream has
started is one ``data: {"error": {...}}`` event (OpenAI's client raises it) before ``[DONE]``. A
non-streamed route collects the final outputs while watching the connection: a client that goes
away aborts its requests at once (a streamed one is cancelled by the response on disconnect).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import secrets
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any

from fastapi import Request
from fastapi.responses import StreamingResponse

from pyagent_engine.api.async_engine import Generation
from pyagent_engine.requests.request import RequestOutput
from pyagent_engine.server.errors import APIError, as_api_error

DONE = "data: [DONE]\n\n"


def new_id(prefix: str) -> str:
    """A response id such as ``chatcmpl-3f9a...``."""
    return f"{prefix}-{secrets.token_hex(12)}"


def sse(payload: dict[str, Any]) -> str:
    """One server-sent event carrying ``payload`` as JSON."""
    return f"data: {json.dumps(payload, ensure_ascii=False)}\n\n"


def output_error(output: RequestOutput) -> APIError:
    """The API error for a request that ended with ``finish_reason == "error"``: a 400 when its constraint
    never compiled (no backend could serve it, or not in time), else a 500 (the engine failed on it)."""
    message = output.error or "the request failed"
    refused = output.structured is not None and output.structured.backend is None
    return APIError(400 if refused else 500, message)


def event_stream(events: AsyncGenerator[str, None]) -> StreamingResponse:
    """``events`` as a ``text/event-stream`` response; an error while streaming becomes an error event."""

    async def guarded() -> AsyncIterator[str]:
        try:
            async with contextlib.aclosing(events):
                async for event in events:
                    yield event
        except Exception as error:
            yield sse(as_api_error(error).body())
            yield DONE

    return StreamingResponse(guarded(), media_type="text/event-stream",
                             headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})


async def _disconnected(request: Request) -> None:
    while (await request.receive())["type"] != "http.disconnect":
        pass


async def collect(generation: Generation, request: Request) -> list[RequestOutput]:
    """The final output of every request of ``generation``, in submission order.

    Raises:
        APIError: a request failed (see :func:`output_error`), or the client went away (its requests
            are aborted first).
        TimeoutError: the generation ran past the request timeout (its requests are aborted).
    """
    finals: dict[int, RequestOutput] = {}

    async def read() -> None:
        async with contextlib.aclosing(generation.outputs()) as outputs:
            async for index, output in outputs:
                if output.finished:
                    if output.finish_reason == "error":
                        raise output_error(output)
                    finals[index] = output

    reader = asyncio.ensure_future(read())
    watcher = asyncio.ensure_future(_disconnected(request))
    await asyncio.wait({reader, watcher}, return_when=asyncio.FIRST_COMPLETED)
    watcher.cancel()
    if not reader.done():
        reader.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await reader
        raise APIError(499, "the client closed the connection")
    reader.result()
    return [finals[i] for i in range(len(finals))]

