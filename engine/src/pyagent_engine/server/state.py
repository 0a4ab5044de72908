"""What every route reads: the server's settings and the engine they serve."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

import attrs

from pyagent_engine.api.async_engine import AsyncEngine
from pyagent_engine.models.chat_template import ChatTemplate
from pyagent_engine.requests.lora import LoRARequest
from pyagent_engine.server.errors import APIError

MAX_BODY_BYTES = 4 * 2**20
"""The default largest request body (4 MiB)."""


@attrs.frozen(kw_only=True)
class ServerConfig:
    """The settings of ``pyagent serve``.

    Attributes:
        model_names: the names the model answers to (the first is reported in responses).
        api_key: the bearer key every ``/v1`` and tokenizer call must carry (``None``: open).
        tool_parser, reasoning_parser: parser names (``None``: none); see ``pyagent list tool_parser``.
        tool_parser_options, reasoning_parser_options: their options.
        sampler_defaults: sampler parameters every request starts from (the sampler flags of ``serve``).
        max_body_bytes: the largest request body; larger ones get a 413.
        grace_s: seconds running requests get to finish once a shutdown begins.
        allow_runtime_lora_updating: ``POST /v1/load_lora_adapter`` and ``/v1/unload_lora_adapter`` are
            served (``PYAGENT_ALLOW_RUNTIME_LORA_UPDATING``, as vLLM's ``VLLM_ALLOW_RUNTIME_LORA_UPDATING``).
    """

    model_names: tuple[str, ...]
    api_key: str | None = None
    tool_parser: str | None = None
    reasoning_parser: str | None = None
    tool_parser_options: Mapping[str, Any] = attrs.field(factory=dict)
    reasoning_parser_options: Mapping[str, Any] = attrs.field(factory=dict)
    sampler_defaults: Mapping[str, Any] = attrs.field(factory=dict)
    max_body_bytes: int = MAX_BODY_BYTES
    grace_s: float = 30.0
    allow_runtime_lora_updating: bool = False


class ServerState:
    """The engine, its model's facts and the settings, shared by the routes.

    Args:
        engine: the engine stepping on its own thread.
        config: the server's settings.
        chat_template: the template chat requests are rendered with (``None``: the model has none).
    """

    def __init__(self, engine: AsyncEngine, config: ServerConfig, chat_template: ChatTemplate | None) -> None:
        self.engine = engine
        self.config = config
        self.chat_template = chat_template
        self.created = int(time.time())
        loaded = engine.llm.loaded
        self.tokenizer = loaded.tokenizer
        self.model_path = str(loaded.source)
        self.vocab = engine.llm.engine.structured.tokenizer_info.vocab
        self.max_model_len: int = loaded.config.max_position_embeddings
        self.max_constraint_bytes: int = engine.llm.engine.structured.config.max_constraint_bytes
        self.lora_enabled = engine.llm.engine.loras is not None
        self.adapters: dict[str, LoRARequest] = {r.lora_name: r for r in engine.llm.list_loras()}
        """The LoRA adapters served, by name (``--lora-modules`` and ``/v1/load_lora_adapter``)."""

    @property
    def model_name(self) -> str:
        """The name responses report."""
        return self.config.model_names[0]

    def check_model(self, model: str | None) -> None:
        """Raise a 404 for a model this server does not serve (``None``: the served one; a LoRA adapter's
        name is served too)."""
        self.adapter_of(model)

    def adapter_of(self, model: str | None) -> LoRARequest | None:
        """The LoRA adapter a request's ``model`` names (``None``: the base model); a 404 for a name this
        server does not serve."""
        if model is None or model in self.config.model_names:
            return None
        adapter = self.adapters.get(model)
        if adapter is None:
            served = [*self.config.model_names, *self.adapters]
            raise APIError(404, f"the model {model!r} does not exist; this server serves {', '.join(served)}",
                           param="model", code="model_not_found")
        return adapter

    def reported_name(self, adapter: LoRARequest | None) -> str:
        """The ``model`` a response reports: the adapter's name, else the served model's."""
        return self.model_name if adapter is None else adapter.lora_name
