"""A generation request as the engine tracks it, and the output it reports."""

from __future__ import annotations

import enum
import json
import time
from typing import TYPE_CHECKING

import attrs

from pyagent_core.interfaces.proposer import DraftTree
from pyagent_engine.requests.logprobs import TokenLogprob
from pyagent_engine.requests.params import SamplingParams

if TYPE_CHECKING:
    from pyagent_engine.requests.lora import ServedAdapter
    from pyagent_engine.requests.structured_report import StructuredReport


BlockHash = bytes | int
"""A full block's chained hash (:mod:`pyagent_engine.kv.block_hash`): bytes for sha256 and xxhash, an int
for builtin."""


class RequestStatus(enum.Enum):
    """Where a request is: waiting for admission, running, or finished."""

    WAITING = "waiting"
    RUNNING = "running"
    FINISHED = "finished"


@attrs.define(eq=False)
class Request:
    """One request: its tokens, progress through the KV cache, and timing.

    ``num_computed_tokens`` counts the tokens (prompt, then outputs) whose keys and values are in
    the cache. After a preemption it drops to 0 and the request recomputes prompt and outputs.
    With prefix caching, ``block_hashes`` holds the chained hashes of its full blocks (computed on
    demand) and ``num_cached_tokens`` the prompt tokens found cached when it was first admitted.
    With speculative decoding, ``draft`` is the draft verified with it this step (see
    :mod:`pyagent_engine.spec.decoder`).
    ``num_served_tokens`` counts every token scheduled for it (recomputation too): the service a
    scheduling policy sees. ``scheduled_time`` is when it was first admitted from the waiting queue and
    ``token_times`` when each output token was appended (``time.perf_counter()`` readings).
    ``lora`` is the LoRA adapter it runs with (``None``: the base model) and ``lora_slot`` the model's
    slot holding it while it runs (-1 otherwise; see :mod:`pyagent_engine.scheduling.lora_slots`).
    ``logprobs`` holds a record per output token and ``prompt_logprobs`` one per prompt token
    scored so far (``None`` first: the first token follows nothing) when the request asks for them
    (:mod:`pyagent_engine.requests.logprobs`); otherwise they are ``None``.
    """

    request_id: str
    prompt_token_ids: list[int]
    params: SamplingParams
    prompt: str | None = None
    arrival_time: float = attrs.field(factory=time.perf_counter)
    output_token_ids: list[int] = attrs.field(factory=list)
    num_computed_tokens: int = 0
    block_ids: list[int] = attrs.field(factory=list)
    status: RequestStatus = RequestStatus.WAITING
    finish_reason: str | None = None
    error: str | None = None
    scheduled_time: float | None = None
    first_token_time: float | None = None
    token_times: list[float] = attrs.field(factory=list)
    finish_time: float | None = None
    num_preemptions: int = 0
    block_hashes: list[BlockHash] = attrs.field(factory=list)
    num_cached_tokens: int = 0
    draft: DraftTree | None = None
    num_served_tokens: int = 0
    logprobs: list[TokenLogprob] | None = None
    prompt_logprobs: list[TokenLogprob | None] | None = None
    lora: ServedAdapter | None = None
    lora_slot: int = -1

    def __attrs_post_init__(self) -> None:
        if self.params.logprobs is not None and self.logprobs is None:
            self.logprobs = []
        if self.params.prompt_logprobs is not None and self.prompt_logprobs is None:
            self.prompt_logprobs = [None]

    def prompt_positions(self, start: int, stop: int) -> range:
        """Positions of ``start:stop`` whose logits score a prompt token not scored yet (the logits
        at position ``p`` give token ``p + 1``); empty unless the request asks for prompt logprobs."""
        if self.prompt_logprobs is None:
            return range(0)
        return range(max(start, len(self.prompt_logprobs) - 1), min(stop, len(self.prompt_token_ids) - 1))

    @property
    def prefix_salt(self) -> str | None:
        """What is mixed into the first block's prefix-cache hash: ``None`` for a request without a
        ``cache_salt`` on the base model, else its salt and its adapter's
        :attr:`~pyagent_engine.requests.lora.ServedAdapter.cache_key` (so no block is shared across adapters)."""
        if self.lora is None and self.params.cache_salt is None:
            return None
        return json.dumps([self.params.cache_salt, None if self.lora is None else self.lora.cache_key])

    @property
    def needs_prompt_logits(self) -> bool:
        """True while prompt logprobs are asked for and not all scored: the prompt must be computed,
        not taken from the prefix cache."""
        return self.prompt_logprobs is not None and len(self.prompt_logprobs) < len(self.prompt_token_ids)

    @property
    def num_tokens(self) -> int:
        """Prompt plus output tokens so far."""
        return len(self.prompt_token_ids) + len(self.output_token_ids)

    def token_ids(self, start: int, stop: int) -> list[int]:
        """Tokens ``start:stop`` of the prompt followed by the outputs."""
        prompt = self.prompt_token_ids
        if stop <= len(prompt):
            return prompt[start:stop]
        outputs = self.output_token_ids[max(0, start - len(prompt)):stop - len(prompt)]
        return prompt[start:] + outputs if start < len(prompt) else outputs

    @property
    def finished(self) -> bool:
        """True once the request has a finish reason."""
        return self.status is RequestStatus.FINISHED


@attrs.frozen
class RequestMetrics:
    """Timing of one request, in seconds."""

    time_to_first_token: float | None
    total_time: float
    decode_tokens_per_s: float | None


@attrs.frozen
class RequestOutput:
    """What the engine reports for a request: the text so far (or its delta) and, at the end, why it stopped.

    ``text`` is the whole output text so far; ``delta`` the part new since the previous report.
    ``error`` is set (with ``finish_reason == "error"``) when this request failed; the others go on.
    ``num_cached_tokens``: prompt tokens served from the prefix cache instead of being computed.
    ``structured``: for a constrained request, the grammar backend serving it and its jump-forward count.
    ``logprobs``: when the request asks (``SamplingParams.logprobs``), one record per token of
    ``output_token_ids``; ``prompt_logprobs`` (``SamplingParams.prompt_logprobs``): one per prompt
    token, ``None`` for the first (see :mod:`pyagent_engine.requests.logprobs`). ``None`` otherwise.
    """

    request_id: str
    prompt: str | None
    prompt_token_ids: list[int]
    output_token_ids: list[int]
    text: str
    delta: str
    finished: bool
    finish_reason: str | None = None
    error: str | None = None
    metrics: RequestMetrics | None = None
    num_cached_tokens: int = 0
    structured: StructuredReport | None = None
    logprobs: list[TokenLogprob] | None = None
    prompt_logprobs: list[TokenLogprob | None] | None = None
