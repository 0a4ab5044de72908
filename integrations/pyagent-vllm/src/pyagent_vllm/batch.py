"""vLLM's batch changes and request parameters in pyagent's terms. Pure Python: no vLLM import.

vLLM (v1 model runner) tells a logits processor what changed in its persistent batch with a
``vllm.v1.sample.logits_processor.BatchUpdate``: ``removed`` row indices, ``added`` tuples
``(index, SamplingParams, prompt_token_ids | None, output_token_ids)``, and ``moved`` tuples
``(a, b, MoveDirectionality)`` where ``SWAP`` exchanges rows ``a`` and ``b`` and ``UNIDIRECTIONAL``
moves ``a`` into ``b`` and leaves ``a`` empty, applied in that order (removed, added, moved), with
``batch_size`` the rows after the update. pyagent's :class:`~pyagent_core.interfaces.sampler.BatchUpdate`
has the same order and meaning (``MoveKind.SWAP`` / ``MoveKind.MOVE``), so the translation is one
to one; the live ``output_token_ids`` list is passed on as it is, so processors with history
(penalties, DRY, no-repeat-ngram, mirostat) see every token vLLM appends.

Per-request parameters come from ``SamplingParams.extra_args`` (``vllm_xargs`` over HTTP) under the
names ``pyagent generate`` uses (``dry_multiplier``, ``no_repeat_ngram_size``, ``typical_p``...),
plus the request's ``seed`` and its stop token ids (end of sequence included) as
``eos_token_ids``, which ``min_tokens`` reads.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pyagent_core.interfaces.sampler import AddedRequest, BatchUpdate, MovedRequest, MoveKind

SWAP = "SWAP"
"""The name of vLLM's ``MoveDirectionality`` member that exchanges two rows (the other,
``UNIDIRECTIONAL``, moves one row into another and leaves the first empty)."""


def request_params(sampling_params: Any) -> dict[str, Any]:
    """The parameters pyagent's samplers see for a vLLM request.

    ``extra_args`` as given, then (unless ``extra_args`` sets them) ``seed`` from the request and
    ``eos_token_ids``: the ids that stop it (vLLM's ``all_stop_token_ids``, the model's
    end-of-sequence ids included), sorted.
    """
    params: dict[str, Any] = dict(sampling_params.extra_args or {})
    params.setdefault("seed", sampling_params.seed)
    params.setdefault("eos_token_ids", sorted(sampling_params.all_stop_token_ids))
    return params


def translate(update: Any, params: Mapping[int, Mapping[str, Any]] | None = None) -> BatchUpdate | None:
    """pyagent's :class:`BatchUpdate` for vLLM's ``update`` (``None`` stays ``None``).

    Args:
        update: a vLLM ``BatchUpdate`` (or anything with its four fields).
        params: the parameters to give each added row, by row index; rows not in it get
            :func:`request_params` of their ``SamplingParams`` (a caller that has checked the
            parameters already passes the checked ones here).
    """
    if update is None:
        return None
    chosen = params or {}
    added = tuple(
        AddedRequest(index, chosen[index] if index in chosen else request_params(sampling_params),
                     () if prompt is None else prompt, output)
        for index, sampling_params, prompt, output in update.added
    )
    moved = tuple(MovedRequest(a, b, MoveKind.SWAP if direction.name == SWAP else MoveKind.MOVE)
                  for a, b, direction in update.moved)
    return BatchUpdate(update.batch_size, tuple(update.removed), added, moved)
