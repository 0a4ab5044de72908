"""The request bodies of the server, as pydantic models (FastAPI validates them and publishes their schema).

They follow OpenAI's API and take every field of its request schemas; a ``null`` is the field's
default, as OpenAI reads it. Fields that change nothing here are declared, described as ignored, and
listed with the reason in ``docs/server.md``. Fields pyagent adds: the structured-output extras
(``regex``, ``choice``, ``grammar``, ``grammar_backend``...), the scheduling fields ``priority``,
``deadline_s`` and ``tenant``, and any sampler parameter of the engine's chain under the name
``pyagent generate`` uses (``top_k``, ``min_p``, ``dry_multiplier``...): those arrive as extra fields
and the sampler chain refuses one it does not read.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

MAX_N = 64
"""The most choices one request may ask for."""


class StreamOptions(BaseModel):
    """``stream_options``: with ``include_usage`` a last chunk carries the usage (and empty ``choices``)."""

    model_config = ConfigDict(extra="forbid")
    include_usage: bool = False


class JsonSchemaFormat(BaseModel):
    """``response_format.json_schema``: a named schema."""

    model_config = ConfigDict(extra="allow")
    name: str = "response"
    description: str | None = None
    schema_: dict[str, Any] | bool = Field(alias="schema")
    strict: bool | None = None


class ResponseFormat(BaseModel):
    """``response_format``: free text, any JSON object, or JSON following a schema."""

    model_config = ConfigDict(extra="forbid")
    type: Literal["text", "json_object", "json_schema"]
    json_schema: JsonSchemaFormat | None = None


class GenerationRequest(BaseModel):
    """What chat and completion requests share: sampling, stopping, structured output and scheduling."""

    model_config = ConfigDict(extra="allow")

    @model_validator(mode="before")
    @classmethod
    def _null_is_unset(cls, data: Any) -> Any:
        """A field sent as ``null`` takes its default (``"n": null`` is one choice), as OpenAI reads it."""
        return {k: v for k, v in data.items() if v is not None} if isinstance(data, dict) else data

    model: str | None = Field(default=None, description="The served model name (default: the only one served).")
    max_tokens: int | None = Field(default=None, ge=1, description="Most tokens to generate per choice.")
    n: int = Field(default=1, ge=1, le=MAX_N, description="Choices to generate.")
    stream: bool = False
    stream_options: StreamOptions | None = None
    stop: str | list[str] | None = None
    stop_token_ids: list[int] | None = None
    seed: int | None = Field(default=None, ge=0, lt=2**63)
    temperature: float | None = Field(default=None, ge=0, le=100)
    top_p: float | None = Field(default=None, ge=0, le=1)
    frequency_penalty: float | None = Field(default=None, ge=-2, le=2)
    presence_penalty: float | None = Field(default=None, ge=-2, le=2)
    logit_bias: dict[str, float] | None = None
    ignore_eos: bool = False
    user: str | None = Field(default=None, description="Ignored: OpenAI's end-user id, for its abuse monitoring.")
    response_format: ResponseFormat | None = None
    regex: str | None = Field(default=None, description="pyagent: the output must match this regular expression.")
    choice: list[str] | None = Field(default=None, description="pyagent: the output is one of these strings.")
    grammar: str | None = Field(default=None, description="pyagent: the output follows this grammar.")
    grammar_dialect: Literal["ebnf", "gbnf", "lark"] = "ebnf"
    grammar_backend: str = Field(default="auto", description="pyagent: grammar backend by name, or auto.")
    grammar_fallback: bool = Field(default=True, description="pyagent: with auto, try the next backend on a refusal.")
    json_whitespace: Literal["bounded", "any", "compact"] = "bounded"
    priority: int = Field(default=0, description="pyagent: smaller goes first under the priority scheduling policy.")
    deadline_s: float | None = Field(default=None, gt=0, description=(
        "pyagent: seconds after arrival by which the first token is due (deadline-aware policies)."))
    tenant: str | None = Field(default=None, min_length=1, description="pyagent: who sends it (tenant-fair policies).")
    cache_salt: str | None = Field(default=None, min_length=1, description="pyagent: only requests with the same salt "
                                                                  "share prefix-cache blocks.")


class ToolFunction(BaseModel):
    """A function the model may call."""

    model_config = ConfigDict(extra="allow")
    name: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.\-]+$")
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class Tool(BaseModel):
    """``{"type": "function", "function": {...}}``."""

    model_config = ConfigDict(extra="forbid")
    type: Literal["function"] = "function"
    function: ToolFunction


class NamedFunction(BaseModel):
    """``{"name": ...}`` inside a named tool choice."""

    name: str


class NamedToolChoice(BaseModel):
    """``{"type": "function", "function": {"name": ...}}``: the model must call this tool."""

    model_config = ConfigDict(extra="forbid")
    type: Literal["function"] = "function"
    function: NamedFunction


class ToolCallFunction(BaseModel):
    """The function part of a tool call in the history."""

    name: str
    arguments: str | dict[str, Any] = "{}"


class HistoryToolCall(BaseModel):
    """A tool call an assistant message of the history made."""

    model_config = ConfigDict(extra="allow")
    id: str | None = None
    type: Literal["function"] = "function"
    function: ToolCallFunction


class ChatMessage(BaseModel):
    """One message of the conversation; content is text or a list of text parts.

    Every message needs ``content`` but an assistant's that carries ``tool_calls`` (OpenAI, vLLM and
    llama-server refuse a message without it too).
    """

    model_config = ConfigDict(extra="allow")
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[dict[str, Any]] | None = None
    name: str | None = None
    tool_calls: list[HistoryToolCall] | None = None
    tool_call_id: str | None = None
    reasoning_content: str | None = None

    @model_validator(mode="after")
    def _has_content(self) -> ChatMessage:
        called = self.tool_calls or (self.model_extra or {}).get("function_call")
        if self.content is None and not (self.role == "assistant" and called):
            raise ValueError(f"a {self.role} message needs content (a string or a list of text parts); only an "
                             "assistant message with tool_calls may leave it out")
        return self


class ChatCompletionRequest(GenerationRequest):
    """``POST /v1/chat/completions``."""

    messages: list[ChatMessage] = Field(min_length=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    tools: list[Tool] | None = None
    tool_choice: Literal["none", "auto", "required"] | NamedToolChoice | None = None
    functions: list[ToolFunction] | None = Field(default=None, description="Deprecated by OpenAI: read as tools.")
    function_call: Literal["none", "auto"] | NamedFunction | None = Field(
        default=None, description="Deprecated by OpenAI: read as tool_choice (a name as a named function).")
    parallel_tool_calls: bool = True
    logprobs: bool = False
    top_logprobs: int | None = Field(default=None, ge=0, le=20)
    reasoning_effort: str | None = Field(default=None, description=(
        "Given to the chat template as the variable reasoning_effort (templates that read it use it)."))
    modalities: list[Literal["text", "audio"]] | None = Field(default=None, description=(
        "Output types: text only here; asking for audio is a 400."))
    audio: dict[str, Any] | None = Field(default=None, description="Audio output: not served here (a 400).")
    web_search_options: dict[str, Any] | None = Field(default=None, description="Web search: not served here (a 400).")
    store: bool | None = Field(default=None, description="Ignored: this server stores no completions.")
    metadata: dict[str, str] | None = Field(default=None, description="Ignored: tags stored completions (none are).")
    service_tier: str | None = Field(default=None, description="Ignored: this server has one tier.")
    prompt_cache_key: str | None = Field(default=None, description=(
        "Ignored: the prefix cache matches prompts by content (cache_salt isolates tenants)."))
    prompt_cache_retention: str | None = Field(default=None, description="Ignored: see prompt_cache_key.")
    prompt_cache_options: dict[str, Any] | None = Field(default=None, description="Ignored: see prompt_cache_key.")
    safety_identifier: str | None = Field(default=None, description="Ignored: an end-user id for abuse monitoring.")
    verbosity: Literal["low", "medium", "high"] | None = Field(default=None, description=(
        "Ignored: a hint for OpenAI's GPT-5 models."))
    prediction: dict[str, Any] | None = Field(default=None, description=(
        "Ignored: predicted output only speeds OpenAI's replies up; the reply is the same without it."))
    moderation: dict[str, Any] | None = Field(default=None, description="Ignored: this server runs no moderation.")
    add_generation_prompt: bool = True
    chat_template_kwargs: dict[str, Any] | None = Field(default=None, description="pyagent: chat-template variables.")


class CompletionRequest(GenerationRequest):
    """``POST /v1/completions``: prompt as text, a list of texts, token ids, or a list of token id lists."""

    prompt: str | list[str] | list[int] | list[list[int]]
    echo: bool = False
    logprobs: int | None = Field(default=None, ge=0, le=20)
    suffix: str | None = None
    best_of: int | None = Field(default=None, ge=1)


class TokenizeRequest(BaseModel):
    """``POST /tokenize``, in vLLM's body or llama-server's.

    vLLM's: a ``prompt`` (with ``add_special_tokens``, on by default) or chat ``messages`` (through the
    chat template), ``return_token_strs`` for each token's vocabulary entry. llama-server's: ``content``
    (with ``add_special``, off by default, and ``parse_special``), ``with_pieces`` for each token's text.
    """

    model_config = ConfigDict(extra="forbid")
    model: str | None = None
    prompt: str | None = None
    messages: list[ChatMessage] | None = None
    add_special_tokens: bool = True
    add_generation_prompt: bool = True
    return_token_strs: bool = False
    content: str | None = Field(default=None, description="llama-server: the text to tokenize.")
    add_special: bool = Field(default=False, description="llama-server: add the BOS token (with content).")
    parse_special: bool = Field(default=True, description=(
        "llama-server: read special tokens written in the text as such (false: as plain text)."))
    with_pieces: bool = Field(default=False, description=(
        "llama-server: tokens as {id, piece} (the piece's text, or its bytes when not UTF-8)."))


class DetokenizeRequest(BaseModel):
    """``POST /detokenize``: token ids to text (vLLM's and llama-server's body are the same)."""

    model_config = ConfigDict(extra="forbid")
    model: str | None = None
    tokens: list[int]
