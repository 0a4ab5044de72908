"""Stage 8, append, detokenize and stop: each request's tokens join its output, one at a time, until it stops.

A token goes through the request's grammar (which may refuse it), is appended (with its logprob
record when the request asks), is detokenized, and is checked against everything that ends a
request: an end-of-sequence or stop token id, a stop string in the text, ``max_tokens``, the context
length. When the request goes on, the tokens its grammar forces come next (jump-forward). Appending
and stopping are one loop rather than two stages because each decides the next: a stop string ends
a verified draft's tokens part-way, and no forced token follows a stop.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

import attrs

from pyagent_engine.models.tokenizer import Tokenizer
from pyagent_engine.requests.isolation import describe
from pyagent_engine.requests.logprobs import TokenLogprob
from pyagent_engine.requests.request import Request, RequestMetrics, RequestOutput
from pyagent_engine.stages.records import Selection
from pyagent_engine.stages.text_tracker import TextTracker
from pyagent_engine.structured.runtime import StructuredOutputs

Finish = Callable[[Request, str, str | None], RequestOutput]
"""Ends a request (``finish(request, reason, error)``) and returns its final output: the engine's."""


class AppendTokens:
    """Appends tokens to requests, keeps each request's text, and reports outputs.

    Args:
        tokenizer: the model's tokenizer (the text of each request is detokenized incrementally).
        eos_token_ids: the model's end-of-sequence ids.
        max_model_len: the model's context length.
        structured: structured output (grammar accept and jump-forward).
        finish: what ends a request (the engine's: it frees the request's blocks and fires the hook).
    """

    def __init__(self, tokenizer: Tokenizer, eos_token_ids: Sequence[int], max_model_len: int,
                 structured: StructuredOutputs, finish: Finish) -> None:
        self.tokenizer = tokenizer
        self.eos_token_ids = tuple(eos_token_ids)
        self.max_model_len = max_model_len
        self.structured = structured
        self.finish = finish
        self.trackers: dict[str, TextTracker] = {}
        """The text of every unfinished request, by request id."""

    def track(self, request: Request) -> None:
        """Start keeping ``request``'s text (it has just been added)."""
        self.trackers[request.request_id] = TextTracker(self.tokenizer, request.prompt_token_ids, request.params.stop)

    def final_output(self, request: Request) -> RequestOutput:
        """The final output of ``request``, which has just finished: the text held back for a
        possible stop string is released, and its text is no longer kept."""
        self.trackers[request.request_id].finish()
        output = self.report(request, final=True)
        del self.trackers[request.request_id]
        return output

    def run(self, selection: Selection) -> list[RequestOutput]:
        """Append each running request's tokens of ``selection`` until it finishes; return an output per
        token appended (a forced token's text joins the output of the token before it).

        A request whose grammar, detokenization or output fails here ends alone (``output failed``).
        """
        now = time.perf_counter()
        outputs = []
        for i, request in enumerate(selection.requests):
            if request.finished:  # its commit failed
                continue
            records = None if selection.logprobs is None else selection.logprobs[i]
            try:
                for j, token in enumerate(selection.tokens[i]):
                    outputs.append(self._append_sampled(request, token, now, None if records is None else records[j]))
                    if outputs[-1].finished:
                        break
            except Exception as error:  # detokenizing or a grammar failing on this request ends it alone
                if not request.finished:
                    outputs.append(self.finish(request, "error", f"output failed: {describe(error)}"))
        return outputs

    def _append_sampled(self, request: Request, token: int, now: float, record: TokenLogprob | None) -> RequestOutput:
        """Append a chosen token (through the request's grammar, if any), then the tokens it forces.

        A request that asks for logprobs gets no forced tokens: jump-forward appends them without
        computing their logits, so they would have none; they are sampled (under the mask) instead.
        """
        problem = self.structured.accept(request, token)
        if problem is not None:
            return self.finish(request, "error", problem)
        if request.logprobs is not None:
            assert record is not None and record.token_id == token
            request.logprobs.append(record)
            return self._append(request, token, now)
        output = self._append(request, token, now)
        for forced in [] if output.finished else self.structured.jump_forward(request):
            later = self._append(request, forced, now)
            output = attrs.evolve(later, delta=output.delta + later.delta)
            if later.finished:
                break
        return output

    def _append(self, request: Request, token: int, now: float) -> RequestOutput:
        request.output_token_ids.append(token)
        request.token_times.append(now)
        if request.first_token_time is None:
            request.first_token_time = now
        tracker = self.trackers[request.request_id]
        params = request.params
        eos = not params.ignore_eos and token in self.eos_token_ids
        if eos or token in params.stop_token_ids:
            return self.finish(request, "stop", None)
        tracker.add(token)
        if tracker.stopped:
            return self.finish(request, "stop", None)
        if len(request.output_token_ids) >= params.max_tokens or request.num_tokens >= self.max_model_len:
            return self.finish(request, "length", None)
        return self.report(request, final=False)

    def report(self, request: Request, final: bool) -> RequestOutput:
        """``request``'s output now: its text so far and the delta since the previous report; with
        ``final``, its finish reason and timing too."""
        tracker = self.trackers[request.request_id]
        metrics = None
        if final:
            end = request.finish_time or time.perf_counter()
            first = request.first_token_time
            decoded = len(request.output_token_ids) - 1
            metrics = RequestMetrics(
                time_to_first_token=None if first is None else first - request.arrival_time,
                total_time=end - request.arrival_time,
                decode_tokens_per_s=decoded / (end - first) if first is not None and decoded > 0 and end > first
                else None,
            )
        return RequestOutput(
            request_id=request.request_id, prompt=request.prompt, prompt_token_ids=request.prompt_token_ids,
            output_token_ids=list(request.output_token_ids), text=tracker.text, delta=tracker.delta(final),
            finished=final, finish_reason=request.finish_reason, error=request.error, metrics=metrics,
            num_cached_tokens=request.num_cached_tokens, structured=self.structured.report(request),
            logprobs=None if request.logprobs is None else list(request.logprobs),
            prompt_logprobs=None if request.prompt_logprobs is None else list(request.prompt_logprobs),
        )
