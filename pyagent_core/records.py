"""The frozen records that lifecycle and diagnostic hooks receive.

An engine never hands plugins its own mutable objects: each lifecycle hook gets a snapshot of what
it needs (:class:`EngineInfo`, :class:`RequestInfo`, :class:`StepStats`), taken when the event
happens. A metrics exporter, a logger or a scheduler experiment can read them without being able
to break the engine, and an engine other than pyagent's can fire the same hooks by building the
same records. ``pyagent doctor`` asks plugins for :class:`DoctorCheck` rows.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

import attrs


def _frozen_mapping(value: Mapping[str, Any] | None) -> Mapping[str, Any]:
    return MappingProxyType(dict(value or {}))


def _ints(value: Any) -> tuple[int, ...]:
    return tuple(int(v) for v in value)


def _floats(value: Any) -> tuple[float, ...]:
    return tuple(float(v) for v in value)


@attrs.frozen(kw_only=True)
class EngineInfo:
    """What an engine runs: its model, its sizes and the backend chosen for each kind.

    Attributes:
        engine_id: unique among the engines of this process (``"engine-0"``...).
        model: the model's name as the host reports it (``pyagent serve``: its first served name), else its
            path as the user gave it (the embedded model's file path by default).
        architecture: the model architecture (``"llama"``...).
        dtype: the compute dtype (``"float32"``, ``"bfloat16"``).
        vocab_size: the size of the logits' last dimension.
        max_model_len: the longest sequence (prompt plus output) the model takes.
        block_size: tokens per KV-cache block.
        num_kv_blocks: KV-cache blocks allocated for all requests.
        num_state_slots: recurrent-state slots, one per sequence that may run (0 for a model without
            state layers).
        max_num_seqs: the most requests running at once.
        max_num_batched_tokens: the token budget of one step.
        backends: the chosen backend per kind (``{"attention": "paged", "sampler": "top_k,...", ...}``).
    """

    engine_id: str
    model: str
    architecture: str
    dtype: str
    vocab_size: int
    max_model_len: int
    block_size: int
    num_kv_blocks: int
    max_num_seqs: int
    max_num_batched_tokens: int
    num_state_slots: int = 0
    backends: Mapping[str, str] = attrs.field(factory=dict, converter=_frozen_mapping)


@attrs.frozen(kw_only=True)
class RequestInfo:
    """A request at the moment of an event: its tokens so far, its parameters and its timing.

    Times are ``time.perf_counter()`` readings of the engine's process.

    Attributes:
        request_id: unique for the engine's lifetime.
        prompt_token_ids: the prompt.
        output_token_ids: the tokens generated so far (all of them when the request finished).
        params: the request's sampling parameters by name (``max_tokens``, ``temperature``, ``top_k``...).
        arrival_time: when the request entered the engine.
        scheduled_time: when it left the waiting queue for the first time (its queue time ends), or ``None``.
        first_token_time: when its first output token was appended, or ``None``.
        token_times: when each output token was appended, one per token of ``output_token_ids``
            (tokens appended in one step, such as an accepted speculative draft, share a time).
        finish_time: when it finished, or ``None`` while it runs.
        num_cached_tokens: prompt tokens served from the prefix cache instead of being computed.
        num_preemptions: how often it was preempted and recomputed.
        finish_reason: ``"stop"``, ``"length"``, ``"abort"`` or ``"error"`` once finished, else ``None``.
        error: why it failed, when ``finish_reason == "error"``.
        lora_name: the LoRA adapter it runs with (``None``: the base model).
    """

    request_id: str
    prompt_token_ids: tuple[int, ...] = attrs.field(converter=_ints)
    output_token_ids: tuple[int, ...] = attrs.field(default=(), converter=_ints)
    params: Mapping[str, Any] = attrs.field(factory=dict, converter=_frozen_mapping)
    arrival_time: float = 0.0
    scheduled_time: float | None = None
    first_token_time: float | None = None
    token_times: tuple[float, ...] = attrs.field(default=(), converter=_floats)
    finish_time: float | None = None
    num_cached_tokens: int = 0
    num_preemptions: int = 0
    finish_reason: str | None = None
    error: str | None = None
    lora_name: str | None = None


@attrs.frozen(kw_only=True)
class StepStats:
    """What one engine step did. Counters are this step's, not running totals.

    Attributes:
        num_scheduled_tokens: tokens computed this step (prefill chunks, decodes and draft tokens).
        num_prefill_tokens: tokens of prefill chunks.
        num_decode_tokens: requests that decoded one token.
        num_running: requests running after the step.
        num_waiting: requests waiting after the step.
        num_prompt_tokens: prompt tokens of the requests that got their first output token this step
            (each whole prompt, cached part included; counted once per request, never again after a
            preemption).
        num_generation_tokens: output tokens appended to requests this step (sampled, accepted draft and
            grammar-forced tokens).
        num_preempted: requests preempted to make room this step.
        kv_blocks_free: KV blocks free after the step.
        kv_blocks_total: KV blocks in all.
        state_slots_free: recurrent-state slots free after the step (0 for a model without state layers).
        state_slots_total: recurrent-state slots in all.
        num_cached_tokens: prompt tokens served from the prefix cache this step.
        kv_blocks_cached: blocks held by the prefix cache (0 without prefix caching).
        prefix_cache_queried_tokens: prompt tokens looked up in the prefix cache this step.
        prefix_cache_hit_tokens: of those, tokens found cached.
        prefix_cache_evicted_blocks: cached blocks evicted this step.
        offload_blocks_used: blocks held by the host-memory tier (0 without one).
        offload_blocks_saved: blocks copied down to it this step.
        offload_blocks_loaded: blocks copied back from it this step.
        num_drafts: speculative drafts verified this step.
        num_draft_tokens: draft tokens verified this step.
        num_accepted_tokens: draft tokens accepted this step.
        proposer_time_s: time spent drafting this step.
        step_time_s: wall time of the step.
        running_lora_adapters: names of the LoRA adapters running requests use after the step (sorted).
        waiting_lora_adapters: names of those waiting requests ask for (sorted).
        max_lora: the LoRA slots of the model (0: LoRA is off).
    """

    num_scheduled_tokens: int
    num_prefill_tokens: int
    num_decode_tokens: int
    num_running: int
    num_waiting: int
    num_preempted: int
    kv_blocks_free: int
    kv_blocks_total: int
    state_slots_free: int = 0
    state_slots_total: int = 0
    num_cached_tokens: int = 0
    num_prompt_tokens: int = 0
    num_generation_tokens: int = 0
    kv_blocks_cached: int = 0
    prefix_cache_queried_tokens: int = 0
    prefix_cache_hit_tokens: int = 0
    prefix_cache_evicted_blocks: int = 0
    offload_blocks_used: int = 0
    offload_blocks_saved: int = 0
    offload_blocks_loaded: int = 0
    num_drafts: int = 0
    num_draft_tokens: int = 0
    num_accepted_tokens: int = 0
    proposer_time_s: float = 0.0
    step_time_s: float = 0.0
    running_lora_adapters: tuple[str, ...] = ()
    waiting_lora_adapters: tuple[str, ...] = ()
    max_lora: int = 0


@attrs.frozen
class DoctorCheck:
    """One row of ``pyagent doctor``: what was checked, what was found, and what to do if it failed.

    Attributes:
        name: what was checked (``"C kernels"``, ``"embedded model"``).
        ok: whether it is usable.
        detail: what was found (a version, a path, a reason).
        hint: what to run or change when ``ok`` is false (empty when there is nothing to say).
    """

    name: str
    ok: bool
    detail: str
    hint: str = ""
