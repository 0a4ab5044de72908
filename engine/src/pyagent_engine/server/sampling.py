"""A request body to the :class:`~pyagent_engine.requests.params.SamplingParams` of each of its choices.

OpenAI's fields map to the engine's. Every per-request parameter a sampler of the engine's chain
declares (an option of its spec with ``request=True``: ``top_k``, ``min_p``, ``dry_multiplier``... as
``pyagent generate`` names them, a third party's too) is a field of the body, published in the
server's schema with the spec's help (:func:`with_sampler_fields`); the sampler checks its value.
Any other field the body adds is passed on as a sampler parameter too, and the chain refuses one that
no sampler reads. ``response_format``
and the structured-output extras become one constraint, checked here (a bad schema is a 400 before
anything runs) and compiled by the named grammar backend, or the fallback order with ``auto``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any, TypeVar

from pydantic import BaseModel, Field, create_model

from pyagent_core.errors import SpecError
from pyagent_core.interfaces.grammar import ConstraintSpec
from pyagent_core.types import SamplerSpec
from pyagent_engine.requests.params import SamplingParams
from pyagent_engine.requests.structured_params import StructuredOutputParams
from pyagent_engine.server.errors import bad_request
from pyagent_engine.server.protocol import GenerationRequest
from pyagent_engine.structured.checks import check_constraint
from pyagent_sampler_host.parameters import request_parameters

_PASSED = ("frequency_penalty", "presence_penalty")
"""Declared OpenAI fields that are sampler parameters of the chain."""

SAMPLER_FIELD = "x-pyagent-sampler"
"""The schema mark of a body field that a sampler of the chain declares (its value: the samplers)."""

_JSON_TYPES: dict[str, dict[str, Any]] = {
    "int": {"type": "integer"}, "float": {"type": "number"}, "str": {"type": "string"}, "bool": {"type": "boolean"},
    "list[int]": {"type": "array", "items": {"type": "integer"}},
    "list[list[int]]": {"type": "array", "items": {"type": "array", "items": {"type": "integer"}}},
    "dict[int, float]": {"type": "object", "additionalProperties": {"type": "number"}},
    "list[str]": {"type": "array", "items": {"type": "string"}},
}
"""The JSON Schema of each option type, for the published schema (the sampler checks the value)."""

M = TypeVar("M", bound=BaseModel)


def with_sampler_fields(model: type[M], specs: Iterable[SamplerSpec]) -> type[M]:
    """``model`` with a field per per-request parameter that ``specs`` declare and ``model`` does not:
    ``None`` by default, described by the spec's help and typed in the schema by its option type, and
    marked :data:`SAMPLER_FIELD`. The value is not converted: the sampler checks it when the request
    is submitted, as for ``pyagent generate`` and the Python API."""
    fields: dict[str, Any] = {
        name: (Any, Field(default=None, description=f"{param.option.parameter_help} (sampler: "
                                                    f"{', '.join(param.samplers)})",
                          json_schema_extra={**_JSON_TYPES[param.option.type_name],
                                             SAMPLER_FIELD: list(param.samplers)}))
        for name, param in request_parameters(specs).items() if name not in model.model_fields}
    extended: type[M] = create_model(model.__name__, __base__=model, __module__=model.__module__, **fields)
    return extended


def _sampler_fields(body: BaseModel) -> dict[str, Any]:
    """The values of the body's :data:`SAMPLER_FIELD` fields that it sets."""
    marked = [name for name, field in type(body).model_fields.items()
              if isinstance(field.json_schema_extra, dict) and SAMPLER_FIELD in field.json_schema_extra]
    return {name: getattr(body, name) for name in marked if getattr(body, name) is not None}


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
    extra.update(_sampler_fields(body))
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
