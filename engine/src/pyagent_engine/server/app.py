"""The FastAPI application: the OpenAI routes, the tokenizer routes, health and version.

:func:`build_app` takes extra routers (a metrics route, say) and mounts them beside its own, so a
plugin's route needs no change here. Generation and tokenizer routes sit behind the API key when the
server has one; ``/health``, ``/version`` and the extra routers do not.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Sequence
from typing import Any

from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import JSONResponse

from pyagent_engine.server import chat, completions, tokens
from pyagent_engine.server.errors import install_error_handlers
from pyagent_engine.server.limits import BodySizeLimit, guarded_route
from pyagent_engine.server.lora import lora_router
from pyagent_engine.server.protocol import (
    ChatCompletionRequest,
    CompletionRequest,
    DetokenizeRequest,
    TokenizeRequest,
)
from pyagent_engine.server.sampling import with_sampler_fields
from pyagent_engine.server.state import ServerState


def openai_router(state: ServerState) -> APIRouter:
    """``/v1/chat/completions``, ``/v1/completions``, ``/v1/models``, ``/tokenize`` and ``/detokenize``,
    behind the API key and the body checks of :func:`~pyagent_engine.server.limits.guarded_route`."""
    router = APIRouter(route_class=guarded_route(state.config.api_key))

    async def create_chat_completion(body: ChatCompletionRequest, request: Request) -> Any:
        return await chat.chat_completions(body, request, state)

    async def create_completion(body: CompletionRequest, request: Request) -> Any:
        return await completions.completions(body, request, state)

    # the bodies declare the chain's sampler parameters (see server.sampling.with_sampler_fields)
    specs = [s.backend.spec for s in state.engine.llm.engine.sampler.chain.selections]
    create_chat_completion.__annotations__["body"] = with_sampler_fields(ChatCompletionRequest, specs)
    create_completion.__annotations__["body"] = with_sampler_fields(CompletionRequest, specs)
    router.post("/v1/chat/completions", summary="Create a chat completion (OpenAI).")(create_chat_completion)
    router.post("/v1/completions", summary="Create a completion (OpenAI).")(create_completion)

    @router.get("/v1/models", summary="List the served model and its LoRA adapters (OpenAI, with vLLM's parent).")
    async def list_models() -> dict[str, Any]:
        card = {"object": "model", "created": state.created, "owned_by": "pyagent",
                "max_model_len": state.max_model_len}
        data = [{"id": name, **card, "root": state.model_path, "parent": None} for name in state.config.model_names]
        data += [{"id": name, **card, "root": adapter.lora_path, "parent": state.model_name}
                 for name, adapter in list(state.adapters.items())]
        return {"object": "list", "data": data}

    @router.post("/tokenize", summary="Token ids of a prompt, or of chat messages through the chat template "
                                      "(vLLM's body or llama-server's).")
    async def tokenize(body: TokenizeRequest) -> dict[str, Any]:
        state.check_model(body.model)
        return await asyncio.to_thread(tokens.tokenize, state, body)

    @router.post("/detokenize", summary="The text of token ids.")
    async def detokenize(body: DetokenizeRequest) -> dict[str, Any]:
        state.check_model(body.model)
        return await asyncio.to_thread(tokens.detokenize, state, body)

    return router


def service_router(state: ServerState) -> APIRouter:
    """``/health`` (the engine's load; 503 while shutting down) and ``/version``."""
    router = APIRouter()

    @router.get("/health", summary="Whether the server takes requests, and the engine's load.")
    async def health() -> JSONResponse:
        engine = state.engine
        load = engine.load
        body = {"status": "draining" if engine.draining else "ok", "running": load.running, "waiting": load.waiting,
                "kv_blocks_free": load.kv_blocks_free, "kv_blocks_total": load.kv_blocks_total,
                "state_slots_free": load.state_slots_free, "state_slots_total": load.state_slots_total}
        return JSONResponse(body, status_code=503 if engine.draining else 200)

    @router.get("/version", summary="Versions of the engine and the core.")
    async def version() -> dict[str, str]:
        import pyagent_core
        import pyagent_engine

        return {"version": pyagent_engine.__version__, "pyagent_core": pyagent_core.__version__}

    return router


def build_app(state: ServerState, routers: Sequence[APIRouter] = ()) -> FastAPI:
    """The application serving ``state``'s engine, with ``routers`` mounted beside the built-in routes.

    The engine thread starts with the application and stops with it, after the grace period.
    """

    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        state.engine.start()
        yield
        await state.engine.shutdown(state.config.grace_s)

    app = FastAPI(title="pyagent", summary="An OpenAI-compatible server over the pyagent engine.",
                  version=_version(), lifespan=lifespan)
    install_error_handlers(app)
    app.add_middleware(BodySizeLimit, max_bytes=state.config.max_body_bytes)
    for router in (openai_router(state), lora_router(state), service_router(state), *routers):
        app.include_router(router)
    app.state.pyagent = state
    return app


def _version() -> str:
    import pyagent_engine

    return pyagent_engine.__version__
