"""``POST /v1/chat/completions``: the conversation through the chat template, the reply through the parsers.

Streamed, each choice opens with a chunk carrying ``role``, then its deltas (content, reasoning,
tool-call fragments), then one chunk with its ``finish_reason``; with
``stream_options.include_usage`` a last chunk carries the usage with empty ``choices``; ``data:
[DONE]`` ends the stream. A reply with tool calls that ended on its own finishes with ``tool_calls``.

A reply holding a malformed tool call is answered as vLLM answers it: its whole text is the
``content`` and it has no ``tool_calls`` (see :mod:`~pyagent_engine.server.tools`). Streamed, the
fragments of that call already sent stay; the chunk that finishes the choice carries the rest of
the text as ``content`` (so the streamed content adds up to the non-streamed one) and its
``finish_reason`` is ``stop`` or ``length``, not ``tool_calls``.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncGenerator
from typing import Any

from fastapi import Request

from pyagent_core.interfaces.tool_parser import DeltaMessage
from pyagent_core.parsing import MessageParser
from pyagent_engine.api.async_engine import Generation, Submission
from pyagent_engine.requests.request import RequestOutput
from pyagent_engine.server import sampling
from pyagent_engine.server.errors import bad_request
from pyagent_engine.server.logprobs import LogprobWriter
from pyagent_engine.server.protocol import ChatCompletionRequest
from pyagent_engine.server.state import ServerState
from pyagent_engine.server.streaming import DONE, collect, event_stream, new_id, output_error, sse
from pyagent_engine.server.tools import ToolPlan, history, plan_tools


def render(state: ServerState, body: ChatCompletionRequest, plan: ToolPlan) -> tuple[list[int], str]:
    """The prompt's token ids and text: the messages (and offered tools) through the chat template.

    Slow for a large conversation: the routes run it on a worker thread, off the event loop.
    """
    template = state.chat_template
    if template is None:
        raise bad_request("this model has no chat template; use /v1/completions, or start the server with "
                          "--chat-template FILE", "messages")
    variables: dict[str, Any] = {} if body.reasoning_effort is None else {"reasoning_effort": body.reasoning_effort}
    variables.update(body.chat_template_kwargs or {})
    if plan.tools:
        variables["tools"] = list(plan.tools)
    text = template.render(history(body), add_generation_prompt=body.add_generation_prompt, **variables)
    return list(state.tokenizer.encode(text, add_special_tokens=False)), text


def check_unsupported(body: ChatCompletionRequest) -> None:
    """Refuse the OpenAI fields that ask for what this server cannot do (audio out, web search), saying so."""
    if body.modalities is not None and "audio" in body.modalities:
        raise bad_request("this server generates text only: drop 'audio' from modalities", "modalities")
    if body.audio is not None:
        raise bad_request("this server generates text only, no audio: drop audio", "audio")
    if body.web_search_options is not None:
        raise bad_request("this server cannot search the web: drop web_search_options", "web_search_options")


def logprobs_of(body: ChatCompletionRequest) -> int | None:
    """The alternatives per token the engine reports (``None``: no logprobs)."""
    if body.top_logprobs is not None and not body.logprobs:
        raise bad_request("top_logprobs needs logprobs=true", "top_logprobs")
    return (body.top_logprobs or 0) if body.logprobs else None


async def chat_completions(body: ChatCompletionRequest, request: Request, state: ServerState) -> Any:
    """Serve one chat completion request (streamed or not)."""
    adapter = state.adapter_of(body.model)
    check_unsupported(body)
    logprobs = logprobs_of(body)
    config = state.config
    plan = plan_tools(body, config)
    constraint = sampling.constraint_of(body)
    if constraint is not None and plan.constraint is not None:
        raise bad_request("response_format (or a constraint) cannot be combined with tool_choice "
                          "'required' or a named function; keep one", "response_format")
    structured = sampling.structured_params(constraint or plan.constraint, body, state.max_constraint_bytes)
    ids, text = await asyncio.to_thread(render, state, body, plan)
    max_tokens = body.max_completion_tokens or body.max_tokens
    params = sampling.sampling_params(body, max_tokens=max_tokens,
                                      default_max_tokens=max(1, state.max_model_len - len(ids)),
                                      structured=structured, defaults=config.sampler_defaults, logprobs=logprobs)
    generation = await state.engine.generate([Submission(ids, p, text, adapter) for p in params])
    reply = ChatReply(state, plan, len(ids), body)
    if body.stream:
        include_usage = body.stream_options is not None and body.stream_options.include_usage
        return event_stream(reply.stream(generation, include_usage))
    return reply.response(await collect(generation, request))


def _delta(delta: DeltaMessage) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if delta.content:
        out["content"] = delta.content
    if delta.reasoning_content:
        out["reasoning_content"] = delta.reasoning_content
    if delta.tool_calls:
        out["tool_calls"] = [call.to_openai() for call in delta.tool_calls]
    return out


class ChatReply:
    """The response (or the chunks) of one chat request's choices."""

    def __init__(self, state: ServerState, plan: ToolPlan, prompt_tokens: int, body: ChatCompletionRequest) -> None:
        self.plan = plan
        self.model = state.reported_name(state.adapter_of(body.model))
        self.prompt_tokens = prompt_tokens
        self.n = body.n
        self.logprobs = LogprobWriter(state.vocab) if body.logprobs else None
        self.id = new_id("chatcmpl")
        self.created = int(time.time())

    def _usage(self, completion_tokens: int) -> dict[str, int]:
        return {"prompt_tokens": self.prompt_tokens, "completion_tokens": completion_tokens,
                "total_tokens": self.prompt_tokens + completion_tokens}

    def response(self, finals: list[RequestOutput]) -> dict[str, Any]:
        """The ``chat.completion`` object for the choices' final outputs."""
        choices = []
        for index, output in enumerate(finals):
            parsed = self.plan.message(output.text, output.finish_reason)
            message = parsed.to_openai()
            if message["reasoning_content"] is None:
                del message["reasoning_content"]
            reason = self.plan.finish_reason(parsed, output.finish_reason)
            logprobs = self.logprobs.chat(output.logprobs or ()) if self.logprobs else None
            choices.append({"index": index, "message": message, "logprobs": logprobs, "finish_reason": reason})
        return {"id": self.id, "object": "chat.completion", "created": self.created, "model": self.model,
                "choices": choices, "usage": self._usage(sum(len(o.output_token_ids) for o in finals))}

    def _chunk(self, choices: list[dict[str, Any]], include_usage: bool) -> str:
        chunk: dict[str, Any] = {"id": self.id, "object": "chat.completion.chunk", "created": self.created,
                                 "model": self.model, "choices": choices}
        if include_usage:
            chunk["usage"] = None
        return sse(chunk)

    def _new(self, output: RequestOutput, index: int, scored: list[int]) -> dict[str, Any] | None:
        """The logprobs of choice ``index``'s tokens not sent yet (``None`` without logprobs)."""
        if self.logprobs is None:
            return None
        records = (output.logprobs or [])[scored[index]:]
        scored[index] += len(records)
        return self.logprobs.chat(records)

    async def stream(self, generation: Generation, include_usage: bool) -> AsyncGenerator[str, None]:
        """The chunks of a streamed reply (see the module docstring)."""
        parsers: list[MessageParser] = [self.plan.parser() for _ in range(self.n)]
        sent = [""] * self.n  # content streamed per choice
        scored = [0] * self.n  # logprob records sent per choice
        completion_tokens = 0
        for index in range(self.n):
            yield self._chunk([{"index": index, "delta": {"role": "assistant", "content": ""}, "logprobs": None,
                                "finish_reason": None}], include_usage)
        async with contextlib.aclosing(generation.outputs()) as outputs:
            async for index, output in outputs:
                if output.finish_reason == "error":
                    raise output_error(output)
                pieces = [parsers[index].feed(output.delta) if output.delta else None]
                if output.finished:
                    pieces.append(parsers[index].finish())
                for piece in pieces:
                    delta = _delta(piece) if piece is not None else {}
                    if self.plan.constraint is not None:  # forced calls: no content, not even a cut call's start
                        delta.pop("content", None)
                    if delta:
                        sent[index] += delta.get("content", "")
                        logprobs = self._new(output, index, scored)
                        yield self._chunk([{"index": index, "delta": delta, "logprobs": logprobs,
                                            "finish_reason": None}], include_usage)
                if output.finished:
                    completion_tokens += len(output.output_token_ids)
                    message = self.plan.message(output.text, output.finish_reason)  # the reply, whole
                    content = message.content or ""
                    grown = len(content) > len(sent[index]) and content.startswith(sent[index])
                    rest = {"content": content[len(sent[index]):]} if grown else {}
                    reason = self.plan.finish_reason(message, output.finish_reason)
                    yield self._chunk([{"index": index, "delta": rest, "logprobs": self._new(output, index, scored),
                                        "finish_reason": reason}], include_usage)
        if include_usage:
            yield sse({"id": self.id, "object": "chat.completion.chunk", "created": self.created,
                       "model": self.model, "choices": [], "usage": self._usage(completion_tokens)})
        yield DONE

