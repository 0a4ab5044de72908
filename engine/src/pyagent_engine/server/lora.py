"""``POST /v1/load_lora_adapter`` and ``/v1/unload_lora_adapter``: vLLM's bodies and answers.

Served only when runtime updating is allowed (``PYAGENT_ALLOW_RUNTIME_LORA_UPDATING=true``, as vLLM's
``VLLM_ALLOW_RUNTIME_LORA_UPDATING``; otherwise a 404 saying so) and behind the API key. Loading reads
and checks the adapter on the engine thread between steps: a path that is no adapter of this model is a
400, a name already served a 400 (unless ``load_inplace``), unloading a name not served a 404. Requests
then name the adapter in ``model``; requests already running with an unloaded adapter finish with it.
"""

from __future__ import annotations

import itertools

from fastapi import APIRouter
from fastapi.responses import PlainTextResponse
from pydantic import BaseModel, ConfigDict, Field

from pyagent_core.errors import UnknownLoRAAdapterError
from pyagent_engine.core.engine import Engine
from pyagent_engine.requests.lora import LoRARequest
from pyagent_engine.server.errors import APIError
from pyagent_engine.server.limits import guarded_route
from pyagent_engine.server.state import ServerState

RUNTIME_UPDATING_ENV = "PYAGENT_ALLOW_RUNTIME_LORA_UPDATING"


class LoadLoRAAdapterRequest(BaseModel):
    """vLLM's body of ``/v1/load_lora_adapter``."""

    model_config = ConfigDict(extra="forbid")
    lora_name: str = Field(min_length=1, description="The name requests will give in `model`.")
    lora_path: str = Field(min_length=1, description="The PEFT folder or llama.cpp LoRA GGUF file, on the server.")
    load_inplace: bool = Field(default=False, description="Replace an adapter already served under this name.")


class UnloadLoRAAdapterRequest(BaseModel):
    """vLLM's body of ``/v1/unload_lora_adapter``."""

    model_config = ConfigDict(extra="forbid")
    lora_name: str = Field(min_length=1, description="The adapter to stop serving.")
    lora_int_id: int | None = Field(default=None, description="Accepted as vLLM does; the name decides.")


def lora_router(state: ServerState) -> APIRouter:
    """The two routes, behind the API key and the body checks."""
    router = APIRouter(route_class=guarded_route(state.config.api_key))
    ids = itertools.count(max((r.lora_int_id for r in state.adapters.values()), default=0) + 1)

    def check_allowed() -> None:
        if not state.config.allow_runtime_lora_updating:
            raise APIError(404, f"loading and unloading LoRA adapters at run time is off; start the server with "
                                f"{RUNTIME_UPDATING_ENV}=true (and --enable-lora) to allow it")
        if not state.lora_enabled:
            raise APIError(400, "this server does not serve LoRA adapters; start it with --enable-lora "
                                "(or --lora-modules)")

    @router.post("/v1/load_lora_adapter", summary="Read a LoRA adapter and serve it under a name (vLLM).")
    async def load(body: LoadLoRAAdapterRequest) -> PlainTextResponse:
        check_allowed()
        name = body.lora_name
        if name in state.adapters and not body.load_inplace:
            raise APIError(400, f"the LoRA adapter {name!r} has already been loaded; unload it first or pass "
                                "load_inplace=true", param="lora_name", code="lora_already_loaded")
        if name in state.config.model_names:
            raise APIError(400, f"{name!r} is the base model's name; give the adapter another name", param="lora_name")
        adapter = LoRARequest(name, next(ids), body.lora_path)

        def register(engine: Engine) -> None:
            if body.load_inplace and name in state.adapters:
                engine.remove_lora(name)
                del state.adapters[name]
            engine.add_lora(adapter)

        await state.engine.call(register)
        state.adapters[name] = adapter
        return PlainTextResponse(f"Success: LoRA adapter '{name}' added successfully.")

    @router.post("/v1/unload_lora_adapter", summary="Stop serving a LoRA adapter (vLLM).")
    async def unload(body: UnloadLoRAAdapterRequest) -> PlainTextResponse:
        check_allowed()
        name = body.lora_name
        if name not in state.adapters:
            raise UnknownLoRAAdapterError(f"the LoRA adapter {name!r} cannot be found; served: "
                                          f"{', '.join(state.adapters) or 'none'}")
        del state.adapters[name]
        await state.engine.call(lambda engine: engine.remove_lora(name))
        return PlainTextResponse(f"Success: LoRA adapter '{name}' removed successfully.")

    return router
