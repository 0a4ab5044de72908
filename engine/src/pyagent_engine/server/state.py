"""What every route reads: the server's settings and the engine they serve."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

import attrs

from pyagent_engine.api.async_engine import AsyncEngine
from pyagent_engine.models.chat_template import ChatTemplate
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
        self.vocab = engine.llm.engine.structured.tokenizer_info.vocab
        self.max_model_len: int = loaded.config.max_position_embeddings
        self.max_constraint_bytes: int = engine.llm.engine.structured.config.max_constraint_bytes

    @property
    def model_name(self) -> str:
        """The name responses report."""
        return self.config.model_names[0]

    def check_model(self, model: str | None) -> None:
        """Raise a 404 for a model this server does not serve (``None``: the served one)."""
        if model is not None and model not in self.config.model_names:
            raise APIError(404, f"the model {model!r} does not exist; this server serves "
                                f"{', '.join(self.config.model_names)}", param="model", code="model_not_found")
