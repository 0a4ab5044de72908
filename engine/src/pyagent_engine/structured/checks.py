"""Bad input caught before a constraint reaches any backend: size, JSON, JSON Schema, regex, contradictions.

These checks are cheap and synchronous, so a malformed request fails when it is submitted with a
specific :class:`~pyagent_core.errors.ConstraintError`, and no backend spends time on it. The
nesting depth is checked first, without recursion, because the metaschema check and every backend
walk a schema recursively (a schema nested 100 levels deep used to end in ``RecursionError``);
every ``$ref`` must resolve inside the schema, because a backend meeting a dangling one may fail
only in the middle of generation. What they
cannot see (a keyword no backend implements, a compile that runs too long) is found while
compiling; an unsatisfiable constraint they miss is caught when its compiled grammar allows no
first token (see :mod:`pyagent_engine.structured.orchestrator`).
"""

from __future__ import annotations

import json
import re
import sys
import warnings
from collections.abc import Iterator, Mapping
from typing import Any

from pyagent_core.errors import (
    ConstraintTooDeepError,
    ConstraintTooLargeError,
    InvalidSchemaError,
    RegexSyntaxError,
    UnresolvedReferenceError,
    UnsatisfiableConstraintError,
)
from pyagent_core.interfaces.grammar import ConstraintSpec

MAX_JSON_DEPTH = 64
"""The deepest nesting of objects and arrays a JSON schema or structural tag may have (JSONSchemaBench's
deepest schema nests 34 levels; the metaschema check recursed too deeply at 201)."""

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
    """``text`` parsed as JSON and no deeper than :data:`MAX_JSON_DEPTH`; :class:`InvalidSchemaError`
    saying where it breaks, :class:`ConstraintTooDeepError` when it nests too deeply."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InvalidSchemaError(
            f"the {what} is not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}; fix the JSON"
        ) from None
    except RecursionError:  # the decoder recurses once per level: far past the limit
        value = None
        depth = f"more than {sys.getrecursionlimit()}"
    else:
        nesting = json_depth(value)
        depth = str(nesting) if nesting > MAX_JSON_DEPTH else ""
    if depth:
        raise ConstraintTooDeepError(
            f"the {what} nests {depth} levels of objects and arrays, over the limit of {MAX_JSON_DEPTH}; "
            "flatten it (name repeated parts under $defs and point at them with $ref)"
        )
    return value


def json_depth(value: Any) -> int:
    """How many levels of objects and arrays ``value`` nests (0 for a scalar), found without recursion."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, depth = stack.pop()
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else None
        if children is not None:
            deepest = max(deepest, depth)
            stack.extend((child, depth + 1) for child in children)
    return deepest


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
    """Check ``schema``'s depth, validate it against its metaschema, resolve every ``$ref``, then look
    for contradictions every output must meet."""
    import jsonschema
    from jsonschema.validators import validator_for

    depth = json_depth(schema)
    if depth > MAX_JSON_DEPTH:
        raise ConstraintTooDeepError(
            f"the JSON schema nests {depth} levels of objects and arrays, over the limit of {MAX_JSON_DEPTH}; "
            "flatten it (name repeated parts under $defs and point at them with $ref)"
        )
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
    for ref, why in unresolved_refs(schema):
        raise UnresolvedReferenceError(
            f"the JSON schema's $ref {ref!r} does not resolve: {why}; define what it names "
            "(under $defs) or fix the reference: remote schemas are not fetched"
        )
    for path, subschema in required_subschemas(schema, "$"):
        problem = contradiction(subschema)
        if problem:
            raise UnsatisfiableConstraintError(
                f"the JSON schema can never be met: at {path}: {problem}; relax the schema"
            )


def unresolved_refs(schema: Any) -> Iterator[tuple[str, str]]:
    """``($ref, why)`` for each ``$ref`` of ``schema`` that resolves to nothing inside it.

    References are resolved as JSON Schema does (``referencing``, the library ``jsonschema`` uses):
    against the base URI of the enclosing ``$id``, to JSON pointers, anchors and embedded resources.
    Nothing is retrieved, so a reference to a schema outside the document is unresolved too.
    """
    from referencing import Registry
    from referencing.exceptions import NoSuchAnchor, PointerToNowhere, Unresolvable
    from referencing.jsonschema import DRAFT202012, specification_with

    dialect = schema.get("$schema", "") if isinstance(schema, Mapping) else ""
    spec = specification_with(dialect, default=DRAFT202012)
    stack = [(schema, Registry().resolver_with_root(spec.create_resource(schema)))]
    while stack:
        subschema, resolver = stack.pop()
        if not isinstance(subschema, Mapping):
            continue
        resolver = resolver.in_subresource(spec.create_resource(subschema))
        ref = subschema.get("$ref")
        if isinstance(ref, str):
            try:
                resolver.lookup(ref)
            except PointerToNowhere as exc:
                yield ref, f"no location {exc.ref!r} in it"
            except NoSuchAnchor as exc:
                yield ref, f"no $anchor {exc.anchor!r} in it"
            except Unresolvable:
                yield ref, "it names a schema outside this one"
        stack.extend((child, resolver) for child in spec.subresources_of(subschema))


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
