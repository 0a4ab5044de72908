"""A request body to the :class:`~pyagent_engine.requests.params.SamplingParams` of each of its choices.

OpenAI's fields map to the engine's; every field the body adds beyond the declared ones is a
sampler parameter (``top_k``, ``min_p``, ``dry_multiplier``... as ``pyagent generate`` names them),
checked by the engine's sampler chain, which refuses one that no sampler reads. ``response_format``
and the structured-output extras become one constraint, checked here (a bad schema is a 400 before
anything runs) and compiled by the named grammar backend, or the fallback order with ``auto``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from pyagent_core.errors import SpecError
from pyagent_core.interfaces.grammar import ConstraintSpec
from pyagent_engine.requests.params import SamplingParams
from pyagent_engine.requests.structured_params import StructuredOutputParams
from pyagent_engine.server.errors import bad_request
from pyagent_engine.server.protocol import GenerationRequest
from pyagent_engine.structured.checks import check_constraint

_PASSED = ("frequency_penalty", "presence_penalty")
"""Declared OpenAI fields that are sampler parameters of the chain."""


def _logit_bias(bias: Mapping[str, float]) -> dict[int, float]:
    try:
        return {int(token): float(value) for token, value in bias.items()}
    except ValueError:
        raise bad_request("logit_bias maps token ids (as strings of digits) to biases, e.g. {\"15\": -100}; "
                          f"got keys {list(bias)[:5]}", "logit_bias") from None


def sampler_extras(body: GenerationRequest, defaults: Mapping[str, Any]) -> dict[str, Any]:
    """The parameters for samplers beyond temperature/top_p/seed: the server's defaults, then the body's."""
    extra = dict(defaults)
    extra.update({name: getattr(body, name) for name in _PASSED if getattr(body, name) is not None})
    if body.logit_bias:
        extra["logit_bias"] = _logit_bias(body.logit_bias)
    extra.update(body.model_extra or {})
    return extra


def _spec(field: str, **constraint: Any) -> ConstraintSpec:
    """The constraint of ``field``; a 400 naming it when the constraint is malformed (empty, say)."""
    try:
        return ConstraintSpec(**constraint)
    except SpecError as error:
        raise bad_request(str(error), field) from None


def constraint_of(body: GenerationRequest) -> ConstraintSpec | None:
    """The body's output constraint (``response_format`` or one structured-output extra), ``None`` for free text.

    Raises:
        APIError: several constraints, a malformed one, or a ``json_schema`` response format without a schema.
    """
    given: list[tuple[str, ConstraintSpec]] = []
    fmt = body.response_format
    whitespace = body.json_whitespace
    if fmt is not None and fmt.type == "json_object":
        given.append(("response_format", _spec("response_format", json_object=True, whitespace=whitespace)))
    elif fmt is not None and fmt.type == "json_schema":
        if fmt.json_schema is None:
            raise bad_request("response_format of type json_schema needs a json_schema object with a schema",
                              "response_format")
        schema = fmt.json_schema.schema_
        given.append(("response_format", _spec("response_format", json_schema=schema if isinstance(schema, dict)
                                                else json.dumps(schema), whitespace=whitespace)))
    if body.regex is not None:
        given.append(("regex", _spec("regex", regex=body.regex)))
    if body.choice is not None:
        given.append(("choice", _spec("choice", choice=body.choice)))
    if body.grammar is not None:
        given.append(("grammar", _spec("grammar", grammar=body.grammar, grammar_dialect=body.grammar_dialect)))
    if len(given) > 1:
        raise bad_request(f"a request takes one constraint, got {' and '.join(n for n, _ in given)}; keep one",
                          given[1][0])
    return given[0][1] if given else None


def structured_params(constraint: ConstraintSpec | None, body: GenerationRequest,
                      max_constraint_bytes: int) -> StructuredOutputParams | None:
    """``constraint`` checked (a malformed schema, regex... raises its ``ConstraintError``) with the body's
    grammar backend; ``None`` without a constraint."""
    if constraint is None:
        if body.grammar_backend != "auto":
            raise bad_request("grammar_backend needs a constraint (response_format, regex, choice or grammar)",
                              "grammar_backend")
        return None
    check_constraint(constraint, max_constraint_bytes)
    return StructuredOutputParams(constraint=constraint, backend=body.grammar_backend,
                                  fallback=body.grammar_fallback)


def sampling_params(body: GenerationRequest, *, max_tokens: int | None, default_max_tokens: int,
                    structured: StructuredOutputParams | None, defaults: Mapping[str, Any],
                    logprobs: int | None = None, prompt_logprobs: int | None = None) -> list[SamplingParams]:
    """One :class:`SamplingParams` per choice (``n``); with a seed, choice ``i`` gets ``seed + i``.

    ``default_max_tokens`` applies when the body sets no ``max_tokens`` (the rest of the context);
    ``logprobs`` and ``prompt_logprobs`` are the alternatives per token to report (``None``: none).
    Raises :class:`~pyagent_core.errors.RequestError` for a value the engine refuses.
    """
    stop = (body.stop,) if isinstance(body.stop, str) else tuple(body.stop or ())
    common: dict[str, Any] = {
        "max_tokens": max_tokens if max_tokens is not None else default_max_tokens,
        "stop": stop, "stop_token_ids": tuple(body.stop_token_ids or ()), "ignore_eos": body.ignore_eos,
        "extra": sampler_extras(body, defaults), "structured": structured, "priority": body.priority,
        "deadline_s": body.deadline_s, "tenant": body.tenant, "cache_salt": body.cache_salt,
        "logprobs": logprobs, "prompt_logprobs": prompt_logprobs,
        **({"temperature": body.temperature} if body.temperature is not None else {}),
        **({"top_p": body.top_p} if body.top_p is not None else {}),
    }
    if "top_k" in common["extra"]:  # a SamplingParams field, not a sampler extra
        common["top_k"] = common["extra"].pop("top_k")
    seed = body.seed
    return [SamplingParams(**common, seed=None if seed is None else seed + i) for i in range(body.n)]
