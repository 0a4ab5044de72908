"""Bad input caught before a constraint reaches any backend: size, JSON, JSON Schema, regex, contradictions.

These checks are cheap and synchronous, so a malformed request fails when it is submitted with a
specific :class:`~pyagent_core.errors.ConstraintError`, and no backend spends time on it. What they
cannot see (a keyword no backend implements, a compile that runs too long) is found while
compiling; an unsatisfiable constraint they miss is caught when its compiled grammar allows no
first token (see :mod:`pyagent_engine.structured.orchestrator`).
"""

from __future__ import annotations

import json
import re
import warnings
from collections.abc import Iterator, Mapping
from typing import Any

from pyagent_core.errors import (
    ConstraintTooLargeError,
    InvalidSchemaError,
    RegexSyntaxError,
    UnsatisfiableConstraintError,
)
from pyagent_core.interfaces.grammar import ConstraintSpec

_BOUNDS = (
    # (types the keywords constrain, lower bound keyword, upper bound keyword)
    (("integer", "number"), "minimum", "maximum"),
    (("integer", "number"), "exclusiveMinimum", "exclusiveMaximum"),
    (("integer", "number"), "exclusiveMinimum", "maximum"),
    (("integer", "number"), "minimum", "exclusiveMaximum"),
    (("string",), "minLength", "maxLength"),
    (("array",), "minItems", "maxItems"),
    (("object",), "minProperties", "maxProperties"),
)


def constraint_size(constraint: ConstraintSpec) -> int:
    """Bytes of the constraint's text (the choices joined for a choice constraint)."""
    value = constraint.value
    if isinstance(value, tuple):
        return sum(len(choice.encode("utf-8")) for choice in value)
    return len(value.encode("utf-8")) if isinstance(value, str) else 0


def check_constraint(constraint: ConstraintSpec, max_bytes: int) -> None:
    """Raise the specific :class:`~pyagent_core.errors.ConstraintError` for a malformed constraint.

    Checks the size limit, then per kind: a JSON schema must parse and validate against its
    metaschema (the ``$schema`` it names, else draft 2020-12), and must not contradict itself where
    it applies; a regex must compile (escapes some backends know and Python does not, like
    ``\\p{L}``, are left to the backends); a structural tag must be JSON.
    """
    size = constraint_size(constraint)
    if size > max_bytes:
        raise ConstraintTooLargeError(
            f"the {constraint.kind} constraint is {size} bytes, over the limit of {max_bytes} bytes; "
            "shorten it or raise the limit (max_constraint_bytes / --grammar-max-bytes)"
        )
    if constraint.json_schema is not None:
        check_json_schema(parse_json(constraint.json_schema, "JSON schema"))
    elif constraint.regex is not None:
        check_regex(constraint.regex)
    elif constraint.structural_tag is not None:
        parse_json(constraint.structural_tag, "structural tag")


def parse_json(text: str, what: str) -> Any:
    """``text`` parsed as JSON; :class:`InvalidSchemaError` saying where it breaks."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise InvalidSchemaError(
            f"the {what} is not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}; fix the JSON"
        ) from None


def _regex_problem(pattern: str) -> str | None:
    """Why ``pattern`` does not compile, or ``None`` (escapes Python lacks, like ``\\p{L}``, pass)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # FutureWarning about possible future set syntax
            re.compile(pattern)
    except re.error as exc:
        return None if exc.msg.startswith("bad escape") else f"{exc.msg} at position {exc.pos}"
    return None


def check_regex(pattern: str) -> None:
    """:class:`RegexSyntaxError` when ``pattern`` does not compile (bad escapes are left to backends)."""
    problem = _regex_problem(pattern)
    if problem:
        raise RegexSyntaxError(f"regex {pattern!r} does not parse: {problem}; fix the pattern")


def _pattern_checker() -> Any:
    """A format checker for metaschema validation that checks ``format: regex`` as :func:`check_regex` does."""
    import jsonschema

    checker = jsonschema.FormatChecker(formats=())

    @checker.checks("regex", raises=ValueError)
    def _regex(instance: object) -> bool:
        problem = _regex_problem(instance) if isinstance(instance, str) else None
        if problem:
            raise ValueError(problem)
        return True

    return checker


def check_json_schema(schema: Any) -> None:
    """Validate ``schema`` against its metaschema, then look for contradictions every output must meet."""
    import jsonschema
    from jsonschema.validators import validator_for

    if not isinstance(schema, (dict, bool)):
        raise InvalidSchemaError(f"a JSON schema is an object or a boolean, got {type(schema).__name__} "
                                 f"{json.dumps(schema)[:60]}; give a schema object such as {{\"type\": \"object\"}}")
    validator = validator_for(schema, default=jsonschema.Draft202012Validator)
    meta = validator(validator.META_SCHEMA, format_checker=_pattern_checker())
    error = jsonschema.exceptions.best_match(meta.iter_errors(schema))
    if error is not None:
        cause = f" ({error.cause})" if error.cause else ""
        raise InvalidSchemaError(
            f"the JSON schema is not valid {validator.__name__.removesuffix('Validator')}: at {error.json_path}: "
            f"{error.message}{cause}; fix the schema (checked against its metaschema)"
        )
    for path, subschema in required_subschemas(schema, "$"):
        problem = contradiction(subschema)
        if problem:
            raise UnsatisfiableConstraintError(
                f"the JSON schema can never be met: at {path}: {problem}; relax the schema"
            )


def required_subschemas(schema: Any, path: str) -> Iterator[tuple[str, Any]]:
    """``schema`` and the subschemas every valid instance must also meet: ``allOf`` members and the
    schemas of required properties of object schemas (``$ref`` is not followed)."""
    yield path, schema
    if not isinstance(schema, Mapping):
        return
    for index, member in enumerate(schema.get("allOf", ())):
        yield from required_subschemas(member, f"{path}.allOf[{index}]")
    properties = schema.get("properties")
    if schema.get("type") == "object" and isinstance(properties, Mapping):
        for name in schema.get("required", ()):
            if name in properties:
                yield from required_subschemas(properties[name], f"{path}.properties.{name}")


def contradiction(schema: Any) -> str | None:
    """Why no instance can meet ``schema`` on its own, or ``None`` when this check sees no reason."""
    if schema is False:
        return "the schema is false"
    if not isinstance(schema, Mapping):
        return None
    if "enum" in schema and not schema["enum"]:
        return "enum is empty"
    if schema.get("not") in ({}, True):
        return f"not {json.dumps(schema['not'])} rejects everything"
    types = schema.get("type")
    declared = {types} if isinstance(types, str) else set(types) if isinstance(types, list) else None
    if declared is not None and not declared:
        return "type is an empty list"
    for applies_to, low_key, high_key in _BOUNDS:
        low, high = schema.get(low_key), schema.get(high_key)
        if not (_is_number(low) and _is_number(high)) or declared is None or not declared <= set(applies_to):
            continue
        assert low is not None and high is not None
        strict = low_key.startswith("exclusive") or high_key.startswith("exclusive")
        if low > high or (strict and low == high):
            return f"{low_key} {low} and {high_key} {high} leave no {'/'.join(sorted(declared))} value"
    return None


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)
