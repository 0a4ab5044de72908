"""OpenAI's error body for every failure: ``{"error": {"message", "type", "param", "code"}}``.

Bad input is a 400 (pydantic's 422 too), a missing or wrong key a 401, an unknown model or route a
404, a body over the limit a 413, an overloaded or stopping server a 503. Anything unexpected is a
500 whose message names the exception type only: no traceback ever reaches a client.
"""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException

from pyagent_core.errors import (
    ChatTemplateError,
    LoRAAdapterError,
    OptionError,
    PyagentError,
    RequestError,
    SelectionError,
    UnknownLoRAAdapterError,
)
from pyagent_engine.api.async_engine import EngineOverloadedError

log = logging.getLogger("pyagent.server")

ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error", 404: "not_found_error",
               405: "invalid_request_error", 413: "invalid_request_error", 503: "overloaded_error",
               504: "timeout_error"}


class APIError(Exception):
    """An error answered with ``status`` and OpenAI's error body."""

    def __init__(self, status: int, message: str, *, param: str | None = None, code: str | None = None,
                 headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.code = code
        self.headers = headers

    def body(self) -> dict[str, Any]:
        """The JSON body: ``{"error": {...}}``."""
        return {"error": {"message": self.message, "type": ERROR_TYPES.get(self.status, "server_error"),
                          "param": self.param, "code": self.code}}

    def response(self) -> JSONResponse:
        """This error as a response."""
        return JSONResponse(self.body(), status_code=self.status, headers=self.headers)


def bad_request(message: str, param: str | None = None) -> APIError:
    """A 400 for an invalid parameter."""
    return APIError(400, message, param=param, code="invalid_parameter" if param else None)


def as_api_error(error: Exception) -> APIError:
    """The API error for an exception raised while serving a request."""
    if isinstance(error, APIError):
        return error
    if isinstance(error, EngineOverloadedError):
        return APIError(503, str(error), code="overloaded")
    if isinstance(error, UnknownLoRAAdapterError):
        return APIError(404, str(error), param="lora_name", code="model_not_found")
    if isinstance(error, (RequestError, ChatTemplateError, OptionError, SelectionError, LoRAAdapterError)):
        return APIError(400, str(error))
    if isinstance(error, TimeoutError):
        return APIError(504, "the request ran past the server's request timeout and was stopped", code="timeout")
    log.exception("unexpected error while serving a request")
    return APIError(500, f"internal error ({type(error).__name__}); the server log has the details")


def _field(loc: tuple[Any, ...]) -> str:
    return ".".join(str(part) for part in loc if part != "body") or "body"


def install_error_handlers(app: FastAPI) -> None:
    """Answer every error of ``app`` with OpenAI's error body."""

    @app.exception_handler(APIError)
    async def api_error(_: Request, error: APIError) -> JSONResponse:
        return error.response()

    @app.exception_handler(RequestValidationError)
    async def invalid(_: Request, error: RequestValidationError) -> JSONResponse:
        problems = error.errors()
        first = problems[0] if problems else {"loc": (), "msg": "invalid request"}
        field = _field(tuple(first.get("loc", ())))
        message = "; ".join(f"{_field(tuple(p.get('loc', ())))}: {p.get('msg')}" for p in problems[:5])
        return APIError(400, message or "invalid request body", param=field).response()

    @app.exception_handler(HTTPException)
    async def http_error(_: Request, error: HTTPException) -> JSONResponse:
        message = error.detail if isinstance(error.detail, str) else "request failed"
        return APIError(error.status_code, message, headers=dict(error.headers or {})).response()

    async def known(_: Request, error: Exception) -> JSONResponse:
        return as_api_error(error).response()

    for kind in (PyagentError, TimeoutError):
        app.add_exception_handler(kind, known)
    app.add_exception_handler(Exception, known)  # last resort: a 500 without a traceback
