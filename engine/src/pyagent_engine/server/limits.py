"""The guards in front of the routes: the request-body size limit, the API key, and the body's text.

A guarded route checks, in this order: the API key (401), the body's size as it arrives (413, from
:class:`BodySizeLimit`), that the body is UTF-8 and JSON (400 saying where it is not), and that no
string of it holds a lone surrogate (400 naming the field); only then does FastAPI validate it
against the route's model. So an unauthenticated client learns nothing about its body, and no text
that a tokenizer or grammar compiler cannot take reaches one.
"""

from __future__ import annotations

import hmac
import json
from collections.abc import Callable, Coroutine
from typing import Any

from fastapi import Request, Response
from fastapi.routing import APIRoute
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from pyagent_core.text import text_problem
from pyagent_engine.server.errors import APIError, bad_request


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


def check_api_key(request: Request, api_key: str | None) -> None:
    """Raise a 401 unless the request carries ``Authorization: Bearer <api_key>`` (``None``: no key needed)."""
    if api_key is None:
        return
    scheme, _, given = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not hmac.compare_digest(given.strip().encode(), api_key.encode()):
        raise APIError(401, "a valid API key is needed: send the header 'Authorization: Bearer <key>' with the "
                            "key the server was started with (--api-key)", code="invalid_api_key",
                       headers={"WWW-Authenticate": "Bearer"})


def _path(parent: str, key: str | int) -> str:
    if isinstance(key, int):
        return f"{parent}[{key}]"
    return f"{parent}.{key}" if parent else key


def check_body(data: bytes) -> None:
    """Raise a 400 when ``data`` is not UTF-8, not JSON, or holds a string that is not whole Unicode.

    An empty body passes (the route's model says what is missing). A string's problem names its
    field as ``messages[0].content``; a bad key names the object holding it.
    """
    if not data:
        return
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise bad_request(f"the request body is not UTF-8 (byte 0x{data[error.start]:02x} at offset {error.start}); "
                          "send JSON encoded as UTF-8") from None
    try:
        value = json.loads(text)
    except json.JSONDecodeError as error:
        raise bad_request(f"the request body is not JSON: {error.msg} at line {error.lineno}, column {error.colno} "
                          f"(character {error.pos}); send one JSON object") from None
    stack: list[tuple[str, Any]] = [("", value)]
    while stack:  # not recursive: a deeply nested body must not exhaust the stack
        where, item = stack.pop()
        if isinstance(item, str):
            problem = text_problem(item)
            if problem is not None:
                raise bad_request(f"{where or 'the body'}: {problem}", where or None)
        elif isinstance(item, dict):
            for key, child in item.items():
                problem = text_problem(key)
                if problem is not None:
                    raise bad_request(f"a key of {where or 'the body'}: {problem}", where or None)
                stack.append((_path(where, key), child))
        elif isinstance(item, list):
            stack.extend((_path(where, index), child) for index, child in enumerate(item))


def guarded_route(api_key: str | None) -> type[APIRoute]:
    """A route class whose routes check the API key, then a POST's body (see the module docstring)."""

    class GuardedRoute(APIRoute):
        """A FastAPI route behind :func:`check_api_key` and :func:`check_body`."""

        def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
            handler = super().get_route_handler()

            async def guarded(request: Request) -> Response:
                check_api_key(request, api_key)
                if request.method == "POST":
                    check_body(await request.body())  # a body over the limit raises to BodySizeLimit: 413
                return await handler(request)

            return guarded

    return GuardedRoute
