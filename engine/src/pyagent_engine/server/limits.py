"""The guards in front of the routes: the request-body size limit and the API key."""

from __future__ import annotations

import hmac
from typing import Any

from fastapi import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from pyagent_engine.server.errors import APIError


class _TooLarge(Exception):
    pass


class BodySizeLimit:
    """ASGI middleware answering 413 for a request body over ``max_bytes`` (declared or as it arrives)."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    def _error(self) -> APIError:
        return APIError(413, f"the request body is over the server's limit of {self.max_bytes} bytes; send a "
                             "smaller one (or start the server with a larger --max-body-bytes)", code="body_too_large")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > self.max_bytes):
            await self._error().response()(scope, receive, send)
            return
        received = 0
        started = False

        async def limited() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_bytes:
                    raise _TooLarge
            return message

        async def watched(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, limited, watched)
        except _TooLarge:
            if not started:
                await self._error().response()(scope, receive, send)


def api_key_guard(api_key: str | None) -> Any:
    """A FastAPI dependency that answers 401 unless the request carries ``Authorization: Bearer <api_key>``."""

    async def guard(request: Request) -> None:
        if api_key is None:
            return
        scheme, _, given = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(given.strip().encode(), api_key.encode()):
            raise APIError(401, "a valid API key is needed: send the header 'Authorization: Bearer <key>' with the "
                                "key the server was started with (--api-key)", code="invalid_api_key",
                           headers={"WWW-Authenticate": "Bearer"})

    return guard
