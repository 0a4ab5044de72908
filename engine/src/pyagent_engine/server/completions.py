"""``POST /v1/completions``: raw prompts (text, texts, token ids or lists of them) continued as they are.

Choice ``i * n + j`` is the ``j``-th choice of prompt ``i``. ``echo`` puts the prompt before the
text. Streamed, each chunk carries one choice's new text, the last one of a choice its
``finish_reason``; usage and ``[DONE]`` end it as in chat.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncGenerator, Sequence
from typing import Any

from fastapi import Request

from pyagent_engine.api.async_engine import Generation, Submission
from pyagent_engine.requests.logprobs import TokenLogprob
from pyagent_engine.requests.request import RequestOutput
from pyagent_engine.server import sampling
from pyagent_engine.server.errors import bad_request
from pyagent_engine.server.logprobs import LogprobWriter
from pyagent_engine.server.protocol import CompletionRequest
from pyagent_engine.server.state import ServerState
from pyagent_engine.server.streaming import DONE, collect, event_stream, new_id, output_error, sse


def check_unsupported(body: CompletionRequest) -> None:
    """Refuse what the server cannot do, saying so."""
    if body.suffix is not None:
        raise bad_request("suffix (fill-in-the-middle) is not supported by this server; drop it", "suffix")
    if body.best_of is not None and body.best_of > body.n:
        raise bad_request(f"best_of={body.best_of} > n={body.n} is not supported (the server returns every choice "
                          "it generates); drop best_of or set it to n", "best_of")


def prompts(state: ServerState, body: CompletionRequest) -> list[tuple[list[int], str]]:
    """Each prompt's token ids and text (token-id prompts decoded for ``echo``); slow for large prompts,
    so the route runs it on a worker thread, off the event loop."""
    raw = body.prompt
    items: Sequence[str | list[int]]
    if isinstance(raw, str) or (raw and all(isinstance(t, int) for t in raw)):
        items = [raw]  # type: ignore[list-item]
    else:
        items = raw  # type: ignore[assignment]
    if not items:
        raise bad_request("prompt is empty; give a text, a list of texts or token ids", "prompt")
    out = []
    for index, item in enumerate(items):
        if not item:
            raise bad_request(f"prompt {index} is empty; give at least one token of text", "prompt")
        if isinstance(item, str):
            out.append((list(state.tokenizer.encode(item)), item))
        else:
            vocab = state.engine.llm.loaded.config.vocab_size
            if not all(0 <= t < vocab for t in item):
                raise bad_request(f"prompt token ids must be in [0, {vocab})", "prompt")
            out.append((list(item), state.tokenizer.decode(item)))
    return out


async def completions(body: CompletionRequest, request: Request, state: ServerState) -> Any:
    """Serve one completion request (streamed or not)."""
    adapter = state.adapter_of(body.model)
    check_unsupported(body)
    structured = sampling.structured_params(sampling.constraint_of(body), body, state.max_constraint_bytes)
    submissions: list[Submission] = []
    items = await asyncio.to_thread(prompts, state, body)
    for ids, text in items:
        params = sampling.sampling_params(body, max_tokens=body.max_tokens,
                                          default_max_tokens=max(1, state.max_model_len - len(ids)),
                                          structured=structured, defaults=state.config.sampler_defaults,
                                          logprobs=body.logprobs,
                                          prompt_logprobs=body.logprobs if body.echo else None)
        submissions.extend(Submission(ids, p, text, adapter) for p in params)
    generation = await state.engine.generate(submissions)
    reply = CompletionReply(state, items, body)
    if body.stream:
        include_usage = body.stream_options is not None and body.stream_options.include_usage
        return event_stream(reply.stream(generation, include_usage))
    return reply.response(await collect(generation, request))


class CompletionReply:
    """The response (or the chunks) of one completion request's choices."""

    def __init__(self, state: ServerState, items: list[tuple[list[int], str]], body: CompletionRequest) -> None:
        self.model = state.reported_name(state.adapter_of(body.model))
        self.n = body.n
        self.echo = [text if body.echo else "" for _, text in items for _ in range(body.n)]
        self.logprobs = LogprobWriter(state.vocab) if body.logprobs is not None else None
        self._echoed: set[int] = set()  # choices whose echoed prompt's logprobs went out
        self.prompt_tokens = sum(len(ids) for ids, _ in items)
        self.id = new_id("cmpl")
        self.created = int(time.time())

    def _usage(self, completion_tokens: int) -> dict[str, int]:
        return {"prompt_tokens": self.prompt_tokens, "completion_tokens": completion_tokens,
                "total_tokens": self.prompt_tokens + completion_tokens}

    def _object(self, choices: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
        return {"id": self.id, "object": "text_completion", "created": self.created, "model": self.model,
                "choices": choices, **extra}

    def _logprobs(self, index: int, output: RequestOutput, scored: list[int],
                  written: list[bytes]) -> dict[str, Any] | None:
        """Choice ``index``'s logprobs not sent yet: the echoed prompt's first, then the new output tokens."""
        if self.logprobs is None:
            return None
        token_ids: list[int] = []
        records: list[TokenLogprob | None] = []
        if self.echo[index] and index not in self._echoed and output.prompt_logprobs is not None:
            self._echoed.add(index)
            token_ids.extend(output.prompt_token_ids)
            records.extend(output.prompt_logprobs)
        new = (output.logprobs or [])[scored[index]:]
        token_ids.extend(record.token_id for record in new)
        records.extend(new)
        scored[index] += len(new)
        block, written[index] = self.logprobs.completion(token_ids, records, written[index])
        return block

    def response(self, finals: list[RequestOutput]) -> dict[str, Any]:
        """The ``text_completion`` object for the choices' final outputs."""
        scored, written = [0] * len(finals), [b""] * len(finals)
        choices = [{"index": i, "text": self.echo[i] + output.text,
                    "logprobs": self._logprobs(i, output, scored, written),
                    "finish_reason": output.finish_reason} for i, output in enumerate(finals)]
        return self._object(choices, usage=self._usage(sum(len(o.output_token_ids) for o in finals)))

    async def stream(self, generation: Generation, include_usage: bool) -> AsyncGenerator[str, None]:
        """The chunks of a streamed completion (see the module docstring)."""
        usage: dict[str, Any] = {"usage": None} if include_usage else {}
        completion_tokens = 0
        started = [False] * len(self.echo)
        scored, written = [0] * len(self.echo), [b""] * len(self.echo)
        async with contextlib.aclosing(generation.outputs()) as outputs:
            async for index, output in outputs:
                if output.finish_reason == "error":
                    raise output_error(output)
                text = output.delta if started[index] else self.echo[index] + output.delta
                started[index] = True
                if output.finished:
                    completion_tokens += len(output.output_token_ids)
                if text or output.finished:
                    reason = output.finish_reason if output.finished else None
                    logprobs = self._logprobs(index, output, scored, written)
                    yield sse(self._object([{"index": index, "text": text, "logprobs": logprobs,
                                             "finish_reason": reason}], **usage))
        if include_usage:
            yield sse(self._object([], usage=self._usage(completion_tokens)))
        yield DONE
