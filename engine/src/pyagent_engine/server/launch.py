"""Claim the address before the model loads, then run the application under uvicorn with a graceful shutdown.

:func:`listen` binds the server's socket first, so a bad or busy port is an error in a second, not
after the model has loaded. On SIGTERM (or Ctrl-C) the server keeps its socket open while it drains:
new requests get a 503 and ``/health`` answers 503 ``draining`` (a load balancer stops sending
work), the requests in flight finish for up to the grace period, the rest are aborted (their streams
end with ``finish_reason: "abort"``) and free their KV blocks; only then does uvicorn stop accepting
connections and exit. A second signal stops at once.
"""

from __future__ import annotations

import asyncio
import signal
import socket
from types import FrameType

import uvicorn
from fastapi import FastAPI

from pyagent_core.errors import RequestError
from pyagent_engine.server.state import ServerState

BACKSTOP_S = 10
"""Seconds past the grace period after which uvicorn cancels the connections still open (the aborted
requests' streams have ended by then)."""

DRAIN_POLL_S = 0.05
"""How often a draining server checks whether the engine has finished its requests."""


def listen(host: str, port: int) -> socket.socket:
    """A socket listening on ``host:port``, for :func:`run`.

    Raises:
        RequestError: the port is outside 1-65535, or the address cannot be bound (in use, not an
            address of this machine), saying which and what to do.
    """
    if not 1 <= port <= 65535:
        raise RequestError(f"--port must be from 1 to 65535, got {port}")
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
        sock.listen(2048)
    except (OSError, OverflowError) as error:
        sock.close()
        reason = error.strerror if isinstance(error, OSError) and error.strerror else str(error)
        raise RequestError(f"cannot listen on {host}:{port}: {reason}; choose another --port (or --host), or stop "
                           "the process that holds it") from None
    return sock


class _Server(uvicorn.Server):
    """uvicorn's server, which drains the engine before it stops (see the module docstring)."""

    def __init__(self, config: uvicorn.Config, state: ServerState) -> None:
        super().__init__(config)
        self.pyagent_state = state
        self._drain: asyncio.Task[None] | None = None

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        state = self.pyagent_state
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # not serving yet, or any more
            loop = None
        if state.engine.draining or loop is None or sig not in (signal.SIGINT, signal.SIGTERM):
            super().handle_exit(sig, frame)
            return
        state.engine.drain(state.config.grace_s)
        loop.call_soon_threadsafe(self._watch, sig, frame)  # a signal handler must not touch the loop itself

    def _watch(self, sig: int, frame: FrameType | None) -> None:
        self._drain = asyncio.ensure_future(self._exit_when_idle(sig, frame))

    async def _exit_when_idle(self, sig: int, frame: FrameType | None) -> None:
        """Stop uvicorn once the draining engine holds no request (they finished or were aborted)."""
        while self.pyagent_state.engine.num_active and not self.should_exit:
            await asyncio.sleep(DRAIN_POLL_S)
        super().handle_exit(sig, frame)


def run(app: FastAPI, state: ServerState, sock: socket.socket, log_level: str = "info") -> None:
    """Serve ``app`` on the listening ``sock`` until a signal stops it (see the module docstring)."""
    config = uvicorn.Config(app, log_level=log_level, lifespan="on",
                            timeout_graceful_shutdown=round(state.config.grace_s) + BACKSTOP_S)
    _Server(config, state).run(sockets=[sock])
