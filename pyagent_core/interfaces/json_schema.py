"""Walking a JSON schema for grammar backends: its subschemas, the keywords it uses, its number types.

Grammar backends rewrite schemas before their library compiles them (bounding numbers, see
:attr:`pyagent_core.interfaces.grammar.ConstraintSpec.bounded_numbers`) and the engine asks which
keywords a schema uses to choose a backend that enforces them all. Both walk the schema here: every
subschema under the keywords JSON Schema (drafts 4 to 2020-12) defines as holding schemas, never
values such as ``enum``, ``const`` or ``default``. The walk is iterative, so depth costs no stack.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

SCHEMA_MAPS = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")
"""Keywords whose value maps names to subschemas."""

SCHEMA_LISTS = ("allOf", "anyOf", "oneOf", "prefixItems")
"""Keywords whose value is a list of subschemas."""

SCHEMA_VALUES = ("items", "additionalItems", "additionalProperties", "unevaluatedProperties", "unevaluatedItems",
                 "contains", "not", "if", "then", "else", "propertyNames", "contentSchema")
"""Keywords whose value is one subschema (``items`` may also be a list, as before draft 2020-12)."""


def _children(schema: dict[str, Any]) -> Iterator[Any]:
    for key, value in schema.items():
        if key in SCHEMA_MAPS and isinstance(value, dict):
            yield from value.values()
        elif key in SCHEMA_LISTS and isinstance(value, list):
            yield from value
        elif key in SCHEMA_VALUES:
            yield from value if isinstance(value, list) else (value,)
        elif key == "dependencies" and isinstance(value, dict):  # draft 7: schemas or lists of names
            yield from (v for v in value.values() if isinstance(v, dict))


def subschemas(schema: Any) -> Iterator[dict[str, Any]]:
    """``schema`` and every subschema in it that is an object (boolean schemas are skipped), the
    same objects, so a caller may change them in place."""
    stack = [schema]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            yield item
            stack.extend(_children(item))


def keywords(schema: Any) -> set[str]:
    """The keywords used anywhere in ``schema`` (annotations and unknown keys included)."""
    return {key for subschema in subschemas(schema) for key in subschema}


def number_types(schema: dict[str, Any]) -> set[str]:
    """Which of ``integer`` and ``number`` the ``type`` of ``schema`` names."""
    declared = schema.get("type")
    names = [declared] if isinstance(declared, str) else declared if isinstance(declared, list) else []
    return {name for name in names if name in ("integer", "number")}


def has_lower_bound(schema: dict[str, Any]) -> bool:
    """``schema`` sets ``minimum`` or a numeric ``exclusiveMinimum``."""
    return "minimum" in schema or _is_number(schema.get("exclusiveMinimum"))


def has_upper_bound(schema: dict[str, Any]) -> bool:
    """``schema`` sets ``maximum`` or a numeric ``exclusiveMaximum``."""
    return "maximum" in schema or _is_number(schema.get("exclusiveMaximum"))


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)
