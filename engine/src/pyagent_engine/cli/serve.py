"""``pyagent serve``: the OpenAI-compatible HTTP server (see :mod:`pyagent_engine.server`).

It takes every engine flag of ``pyagent generate`` (the same option declarations), the server's
own (address, key, names, parsers, limits) and the sampler flags, whose per-request values become
every request's defaults. FastAPI, uvicorn and the engine are imported inside the command.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from pyagent_core.commands import ReasoningOpt, ReasoningOptsOpt, ToolParserOpt, ToolParserOptsOpt
from pyagent_core.errors import RequestError
from pyagent_core.options import parse_assignments
from pyagent_core.text import read_utf8
from pyagent_engine.cli import batch_flags, cache_flags, constraints, logprob_flags, lora_flags
from pyagent_engine.cli import speculative as spec_cli
from pyagent_engine.cli.generate import (
    AttentionOpt,
    AttentionOptsOpt,
    DequantizeOpt,
    DtypeOpt,
    KvOpt,
    ModelOpt,
    PrecisionOpt,
    build_llm,
    engine_fields,
)
from pyagent_engine.cli.sampler_flags import SamplerSettings, with_sampler_flags
from pyagent_engine.models.config import DEFAULT_DTYPE

if TYPE_CHECKING:
    from pyagent_engine.api.llm import LLM
    from pyagent_engine.models.chat_template import ChatTemplate
    from pyagent_engine.server.state import ServerConfig

PANEL = "Server"
MIN_REQUEST_TIMEOUT_S = 1.0
"""The shortest ``--request-timeout`` (other than 0): no request is answered faster on a CPU."""
API_KEY_ENV = "PYAGENT_API_KEY"
LOG_LEVELS = ("critical", "error", "warning", "info", "debug", "trace")
"""uvicorn's log levels."""


def _option(flag: str, text: str) -> typer.models.OptionInfo:
    return typer.Option(flag, help=text, rich_help_panel=PANEL)


def chat_template(llm: LLM, path: Path | None) -> ChatTemplate | None:
    """The model's chat template, or the one in ``path``."""
    from pyagent_engine.models.chat_template import ChatTemplate

    model = llm.loaded.chat_template
    if path is None:
        return model
    source = read_utf8(path, "chat template")
    return ChatTemplate(source, model.bos_token if model else "", model.eos_token if model else "")


def served_names(given: list[str] | None, model: str | None) -> tuple[str, ...]:
    """The names the model answers to: ``--served-model-name``, else the model file's name without its
    suffix (a folder's name)."""
    if given:
        return tuple(given)
    from pyagent_engine.models.embedded import find_embedded_gguf

    path = Path(model) if model else find_embedded_gguf()
    if path is None:
        return ("model",)
    return (path.name if path.is_dir() else path.stem,)


def parser_name(given: str | None, template: ChatTemplate | None, detect: str) -> str | None:
    """The parser ``serve`` uses: ``given`` (``none``: off), else ``PYAGENT_TOOL_PARSER`` /
    ``PYAGENT_REASONING_PARSER``, ``pyagent.toml``, the user config, else the one detected from the chat
    template (``None``: none matched); see :func:`pyagent_core.parsing.choose_parser`."""
    from pyagent_core import parsing
    from pyagent_core.kinds import REASONING_PARSER, TOOL_PARSER

    kind = TOOL_PARSER if detect == "tool" else REASONING_PARSER
    return parsing.choose_parser(kind, given, template.source if template is not None else None)[0]


def serve(
    model: ModelOpt = None, dtype: DtypeOpt = DEFAULT_DTYPE, dequantize: DequantizeOpt = False,
    precision: PrecisionOpt = None, attention: AttentionOpt = None, attention_opt: AttentionOptsOpt = None,
    kv_cache_gib: KvOpt = 1.0,
    grammar_order: constraints.GrammarOrderOpt = None, grammar_timeout: constraints.GrammarTimeoutOpt = 30.0,
    no_jump_forward: constraints.NoJumpForwardOpt = False, grammar_cache_mib: constraints.GrammarCacheOpt = None,
    speculative: spec_cli.SpeculativeOpt = None, num_draft_tokens: spec_cli.NumDraftOpt = 8,
    spec_opt: spec_cli.SpecOptsOpt = None, sampler: SamplerSettings | None = None,
    prefix_caching: cache_flags.PrefixCachingOpt = False, eviction: cache_flags.EvictionOpt = None,
    eviction_opt: cache_flags.EvictionOptsOpt = None, kv_hash: cache_flags.KvHashOpt = "sha256",
    offload_blocks: cache_flags.OffloadOpt = 0, scheduler: batch_flags.SchedulerOpt = None,
    scheduler_opt: batch_flags.SchedulerOptsOpt = None,
    max_num_seqs: batch_flags.MaxNumSeqsOpt = 32, max_num_batched_tokens: batch_flags.MaxNumBatchedTokensOpt = 1024,
    block_size: batch_flags.BlockSizeOpt = 16, logprobs_mode: logprob_flags.LogprobsModeOpt = "raw",
    host: Annotated[str, _option("--host", "Address to listen on (0.0.0.0: every interface).")] = "127.0.0.1",
    port: Annotated[int, _option("--port", "Port to listen on.")] = 8000,
    api_key: Annotated[str | None, typer.Option(
        "--api-key", envvar=API_KEY_ENV, rich_help_panel=PANEL,
        help="Bearer key every /v1 and tokenizer request must carry (default: none, open).")] = None,
    served_model_name: Annotated[list[str] | None, _option(
        "--served-model-name", "Name(s) the model answers to (repeatable; default: the model file's name).")] = None,
    tool_parser: ToolParserOpt = None, tool_parser_opt: ToolParserOptsOpt = None,
    reasoning_parser: ReasoningOpt = None, reasoning_parser_opt: ReasoningOptsOpt = None,
    template_path: Annotated[Path | None, _option(
        "--chat-template", "Jinja chat template file to use instead of the model's.")] = None,
    max_body_bytes: Annotated[int, _option("--max-body-bytes", "Largest request body; larger get a 413.")] = 4 * 2**20,
    max_waiting: Annotated[int, _option(
        "--max-waiting", "Most requests waiting to start; more get a 503.")] = 256,
    max_concurrent: Annotated[int, _option(
        "--max-concurrent", "Most requests in the engine at once, running and waiting (0: no cap); more: 503.")] = 0,
    request_timeout: Annotated[float, _option(
        "--request-timeout", "Seconds a request may run before it is aborted (0: no limit).")] = 600.0,
    shutdown_grace: Annotated[float, _option(
        "--shutdown-grace", "Seconds running requests get to finish after SIGTERM before they are aborted.")] = 30.0,
    log_level: Annotated[str, _option("--log-level", "uvicorn's log level.")] = "info",
    enable_lora: lora_flags.EnableLoRAOpt = False, lora_modules: lora_flags.LoRAModulesOpt = None,
    max_loras: lora_flags.MaxLoRAsOpt = None, max_lora_rank: lora_flags.MaxLoRARankOpt = None,
) -> None:
    """Serve the model over an OpenAI-compatible HTTP API (chat, completions, tools, structured output).

    The parsers default to those selected (PYAGENT_TOOL_PARSER, pyagent.toml...), else those detected from
    the chat template (--tool-parser none turns one off). LoRA adapters (--lora-modules NAME=PATH) are
    requested by name in "model"; PYAGENT_ALLOW_RUNTIME_LORA_UPDATING=true serves /v1/load_lora_adapter and
    /v1/unload_lora_adapter.
    """
    from pyagent_engine.api.async_engine import AsyncEngine
    from pyagent_engine.server.app import build_app
    from pyagent_engine.server.launch import listen, run
    from pyagent_engine.server.lora import RUNTIME_UPDATING_ENV
    from pyagent_engine.server.metrics import metrics_router
    from pyagent_engine.server.state import ServerConfig, ServerState

    check_server_flags(max_body_bytes=max_body_bytes, max_waiting=max_waiting, max_concurrent=max_concurrent,
                       request_timeout=request_timeout, shutdown_grace=shutdown_grace, log_level=log_level,
                       api_key=api_key)
    structured = constraints.structured_config(grammar_order, grammar_timeout, no_jump_forward, grammar_cache_mib)
    lora = lora_flags.lora_settings(enable_lora, lora_modules, max_loras, max_lora_rank)
    sock = listen(host, port)  # a busy or bad port fails now, not after the model has loaded
    names = served_names(served_model_name, model)
    engine_config = engine_fields(logprobs_mode, prefix_caching, eviction, eviction_opt, kv_hash, offload_blocks,
                                  scheduler, scheduler_opt, max_num_seqs, max_num_batched_tokens, block_size)
    engine_config["model_name"] = names[0]  # the metrics' model_name label, as vLLM's
    llm = build_llm(model, dtype, attention, attention_opt, kv_cache_gib,
                    structured,
                    spec_cli.speculative_config(speculative, num_draft_tokens, spec_opt), sampler, engine_config,
                    dequantize, precision, lora)
    template = chat_template(llm, template_path)
    config = ServerConfig(
        model_names=names, api_key=api_key,
        tool_parser=parser_name(tool_parser, template, "tool"),
        reasoning_parser=parser_name(reasoning_parser, template, "reasoning"),
        tool_parser_options=parse_assignments(tool_parser_opt or []),
        reasoning_parser_options=parse_assignments(reasoning_parser_opt or []),
        sampler_defaults=dict(sampler.params) if sampler else {}, max_body_bytes=max_body_bytes,
        grace_s=shutdown_grace,
        allow_runtime_lora_updating=os.environ.get(RUNTIME_UPDATING_ENV, "").strip().lower() in ("1", "true"))
    _check_parsers(config)
    engine = AsyncEngine(llm, max_waiting=max_waiting, max_concurrent=max_concurrent,
                         timeout_s=request_timeout or None)
    state = ServerState(engine, config, template)
    adapters = f" + LoRA {', '.join(state.adapters)}" if state.adapters else ""
    typer.echo(f"pyagent serve: {', '.join(config.model_names)}{adapters} on http://{host}:{port} "
               f"[{', '.join(f'{k}={v}' for k, v in llm.engine.backends.items())}; tool parser "
               f"{config.tool_parser or '-'}, reasoning parser {config.reasoning_parser or '-'}]", err=True)
    run(build_app(state, [metrics_router(state)]), state, sock, log_level)


def check_server_flags(*, max_body_bytes: int, max_waiting: int, max_concurrent: int, request_timeout: float,
                       shutdown_grace: float, log_level: str, api_key: str | None) -> None:
    """Raise :class:`RequestError` for a server flag no server can run with, before anything loads."""
    for name, count in (("--max-body-bytes", max_body_bytes), ("--max-waiting", max_waiting)):
        if count <= 0:
            raise RequestError(f"{name} must be positive, got {count}")
    if max_concurrent < 0:
        raise RequestError(f"--max-concurrent must be >= 0 (0: no cap), got {max_concurrent}")
    if not (request_timeout == 0 or MIN_REQUEST_TIMEOUT_S <= request_timeout < math.inf):
        raise RequestError(f"--request-timeout must be 0 (no limit) or a number of seconds from "
                           f"{MIN_REQUEST_TIMEOUT_S:g}, got {request_timeout}: shorter, every request would time out")
    if not 0 <= shutdown_grace < math.inf:
        raise RequestError(f"--shutdown-grace must be a number of seconds >= 0, got {shutdown_grace}")
    if log_level.lower() not in LOG_LEVELS:
        raise RequestError(f"--log-level takes {', '.join(LOG_LEVELS)}, got {log_level!r}")
    if os.environ.get(API_KEY_ENV) == "" and api_key is None:  # click reads an empty variable as unset
        api_key = ""
    if api_key is not None and not api_key.strip():
        raise RequestError("the API key (--api-key or PYAGENT_API_KEY) is empty: give a key, or leave both out "
                           "to serve without one")


def _check_parsers(config: ServerConfig) -> None:
    """Build the parsers once, so a bad name or option fails before the server starts."""
    from pyagent_core.parsing import build_message_parser

    build_message_parser(config.tool_parser, config.reasoning_parser, tool_options=config.tool_parser_options,
                         reasoning_options=config.reasoning_parser_options)


def register(app: typer.Typer) -> None:
    """Add ``serve`` to ``app``."""
    app.command("serve")(with_sampler_flags(serve))
