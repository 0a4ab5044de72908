"""Per-request sampling parameters, validated on construction with messages that say what to fix."""

from __future__ import annotations

import math
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

import attrs

from pyagent_core.errors import RequestError
from pyagent_engine.requests.logprobs import MAX_LOGPROBS
from pyagent_engine.requests.structured_params import StructuredOutputParams


def _check(condition: bool, message: str) -> None:
    if not condition:
        raise RequestError(message)


def _tuple(value: Any) -> tuple[Any, ...]:
    if value is None:
        return ()
    return (value,) if isinstance(value, (str, int)) else tuple(value)


@attrs.frozen(kw_only=True)
class SamplingParams:
    """How one request is sampled and when it stops.

    Attributes:
        max_tokens: the most tokens to generate (> 0).
        temperature: 0 means greedy; otherwise logits are divided by it before sampling.
        top_k: keep the k most likely tokens (0: off).
        top_p: keep the smallest set of tokens with total probability >= top_p (1: off).
        seed: per-request seed; the same seed gives the same tokens whatever the batch.
        stop: strings that end generation; the stop string is not part of the output.
        stop_token_ids: token ids that end generation (besides the model's end-of-sequence ids).
        ignore_eos: keep generating past end-of-sequence tokens.
        extra: parameters for other samplers in the chain, by name (e.g. ``{"min_p": 0.05}``).
        cache_salt: mixed into the prefix-cache hash of the first block, so only requests with the
            same salt share cached blocks (isolates tenants); ``None``: no salt.
        skip_prefix_cache: keep this request out of the prefix cache (it neither reads nor adds blocks).
        structured: a structured-output constraint and the grammar backend to serve it (``None``: free text).
        priority: for the ``priority`` scheduling policy: smaller goes first (an integer, 0 by default).
        deadline_s: seconds after arrival by which the first token is due, for deadline-aware
            scheduling policies (``edf``); ``None``: no deadline.
        tenant: who sends the request, for tenant-fair scheduling policies (``fair``); ``None``: anonymous.
        logprobs: report each generated token's log probability and rank with this many most likely
            alternatives (0 to 20; ``None``: no logprobs); see :mod:`pyagent_engine.requests.logprobs`.
        prompt_logprobs: the same for each prompt token after the first (0 to 20; ``None``: none);
            such a request computes its whole prompt: it reads no blocks from the prefix cache.
    """

    max_tokens: int = 128
    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    seed: int | None = None
    stop: tuple[str, ...] = attrs.field(default=(), converter=_tuple)
    stop_token_ids: tuple[int, ...] = attrs.field(default=(), converter=_tuple)
    ignore_eos: bool = False
    extra: Mapping[str, Any] = attrs.field(factory=dict, converter=lambda m: MappingProxyType(dict(m)))
    cache_salt: str | None = None
    skip_prefix_cache: bool = False
    structured: StructuredOutputParams | None = None
    priority: int = 0
    deadline_s: float | None = None
    tenant: str | None = None
    logprobs: int | None = None
    prompt_logprobs: int | None = None

    def __attrs_post_init__(self) -> None:
        _check(isinstance(self.max_tokens, int) and self.max_tokens > 0,
               f"max_tokens must be a positive integer, got {self.max_tokens!r}")
        _check(isinstance(self.temperature, (int, float)) and math.isfinite(self.temperature)
               and self.temperature >= 0, f"temperature must be a finite number >= 0, got {self.temperature!r}")
        _check(isinstance(self.top_k, int) and self.top_k >= 0,
               f"top_k must be an integer >= 0 (0 turns it off), got {self.top_k!r}")
        _check(isinstance(self.top_p, (int, float)) and 0.0 <= self.top_p <= 1.0,
               f"top_p must be in [0, 1] (1 turns it off), got {self.top_p!r}")
        _check(self.seed is None or (isinstance(self.seed, int) and 0 <= self.seed < 2**64),
               f"seed must be an integer in [0, 2**64) or None, got {self.seed!r}")
        _check(all(isinstance(s, str) and s for s in self.stop),
               f"stop must be non-empty strings, got {list(self.stop)!r}")
        _check(all(isinstance(t, int) and t >= 0 for t in self.stop_token_ids),
               f"stop_token_ids must be non-negative integers, got {list(self.stop_token_ids)!r}")
        _check(self.cache_salt is None or (isinstance(self.cache_salt, str) and self.cache_salt != ""),
               f"cache_salt must be a non-empty string or None, got {self.cache_salt!r}")
        _check(isinstance(self.skip_prefix_cache, bool),
               f"skip_prefix_cache must be True or False, got {self.skip_prefix_cache!r}")
        _check(self.structured is None or isinstance(self.structured, StructuredOutputParams),
               f"structured must be a StructuredOutputParams or None, got {self.structured!r}")
        _check(isinstance(self.priority, int) and not isinstance(self.priority, bool),
               f"priority must be an integer (smaller goes first), got {self.priority!r}")
        deadline = self.deadline_s
        _check(deadline is None or (isinstance(deadline, (int, float)) and not isinstance(deadline, bool)
                                    and math.isfinite(deadline)),
               f"deadline_s must be a number of seconds after arrival or None, got {deadline!r}")
        _check(deadline is None or deadline > 0,
               f"deadline_s is {deadline!r}: a deadline at or before the request's arrival is already past; "
               "give a positive number of seconds (or none)")
        _check(self.tenant is None or (isinstance(self.tenant, str) and self.tenant != ""),
               f"tenant must be a non-empty string or None, got {self.tenant!r}")
        for name in ("logprobs", "prompt_logprobs"):
            value = getattr(self, name)
            _check(value is None or (isinstance(value, int) and not isinstance(value, bool)
                                     and 0 <= value <= MAX_LOGPROBS),
                   f"{name} must be an integer from 0 to {MAX_LOGPROBS} (how many most likely alternatives to "
                   f"report per token) or None for no logprobs, got {value!r}")

    @property
    def greedy(self) -> bool:
        """True when the request takes the most likely token at every step."""
        return self.temperature == 0

    def sampler_params(self) -> dict[str, Any]:
        """The parameters the sampler chain reads, keyed as the samplers name them."""
        return {"temperature": self.temperature, "top_k": self.top_k, "top_p": self.top_p,
                "seed": self.seed, **self.extra}
