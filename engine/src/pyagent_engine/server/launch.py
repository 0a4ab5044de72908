"""Run the application under uvicorn with a graceful shutdown.

On SIGTERM (or Ctrl-C) the server stops accepting connections and new requests (503), lets the
requests in flight finish for up to the grace period, then aborts the rest (their streams end with
``finish_reason: "abort"``), frees their KV blocks and exits.
"""

from __future__ import annotations

from types import FrameType

import uvicorn
from fastapi import FastAPI

from pyagent_engine.server.state import ServerState

BACKSTOP_S = 10
"""Seconds past the grace period after which uvicorn cancels the connections still open (the aborted
requests' streams have ended by then)."""


class _Server(uvicorn.Server):
    """uvicorn's server, which also tells the engine to refuse new work as soon as a shutdown begins."""

    def __init__(self, config: uvicorn.Config, state: ServerState) -> None:
        super().__init__(config)
        self.pyagent_state = state

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        state = self.pyagent_state
        if not state.engine.draining:
            state.engine.drain(state.config.grace_s)
        super().handle_exit(sig, frame)


def run(app: FastAPI, state: ServerState, host: str, port: int, log_level: str = "info") -> None:
    """Serve ``app`` on ``host:port`` until a signal stops it (see the module docstring)."""
    config = uvicorn.Config(app, host=host, port=port, log_level=log_level, lifespan="on",
                            timeout_graceful_shutdown=round(state.config.grace_s) + BACKSTOP_S)
    _Server(config, state).run()
