"""Bad input found before compiling, and the LRU cache against a reference model."""

from __future__ import annotations

import json
from collections import OrderedDict

import jsonschema
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pyagent_core.errors import (
    ConstraintTooDeepError,
    ConstraintTooLargeError,
    InvalidSchemaError,
    RegexSyntaxError,
    UnresolvedReferenceError,
    UnsatisfiableConstraintError,
)
from pyagent_core.interfaces.grammar import ConstraintSpec
from pyagent_engine.structured.cache import LRUCache
from pyagent_engine.structured.checks import MAX_JSON_DEPTH, check_constraint, contradiction, json_depth

from .conftest import SCHEMAS

LIMIT = 64 * 1024


def nested_schema(levels: int) -> dict:
    """An object schema whose required property ``a`` nests ``levels`` object schemas down to an integer."""
    schema: dict = {"type": "integer"}
    for _ in range(levels):
        schema = {"type": "object", "properties": {"a": schema}, "required": ["a"]}
    return schema


@pytest.mark.parametrize(
    ("constraint", "error", "message"),
    [
        (ConstraintSpec(json_schema='{"type": "object",'), InvalidSchemaError, "not valid JSON: .* line 1 column"),
        (ConstraintSpec(json_schema={"type": "no-such-type"}), InvalidSchemaError, r"at \$.type"),
        (ConstraintSpec(json_schema={"properties": {"a": {"minLength": -1}}}), InvalidSchemaError,
         r"\$.properties.a.minLength"),
        (ConstraintSpec(json_schema={"type": "string", "pattern": "(ab"}), InvalidSchemaError,
         r"is not a 'regex' \(missing \)"),
        (ConstraintSpec(json_schema={"$schema": "http://json-schema.org/draft-04/schema#", "type": 3}),
         InvalidSchemaError, "not valid Draft4"),
        (ConstraintSpec(json_schema="[1, 2]"), InvalidSchemaError, "object or a boolean"),
        (ConstraintSpec(regex="(ab"), RegexSyntaxError, "missing \\), unterminated subpattern at position 0"),
        (ConstraintSpec(regex="a{3,1}"), RegexSyntaxError, "does not parse"),
        (ConstraintSpec(json_schema={"type": "integer", "minimum": 5, "maximum": 3}), UnsatisfiableConstraintError,
         r"at \$: minimum 5 and maximum 3 leave no integer value"),
        (ConstraintSpec(json_schema={"type": "object", "required": ["a"], "properties": {"a": {"enum": []}}}),
         UnsatisfiableConstraintError, r"\$.properties.a: enum is empty"),
        (ConstraintSpec(json_schema={"allOf": [{"type": "string", "minLength": 4, "maxLength": 2}]}),
         UnsatisfiableConstraintError, r"\$.allOf\[0\]"),
        (ConstraintSpec(json_schema={"not": {}}), UnsatisfiableConstraintError, "rejects everything"),
        (ConstraintSpec(json_schema="false"), UnsatisfiableConstraintError, "the schema is false"),
        (ConstraintSpec(choice=["x" * (LIMIT + 1)]), ConstraintTooLargeError, f"over the limit of {LIMIT} bytes"),
        (ConstraintSpec(structural_tag="{oops"), InvalidSchemaError, "structural tag is not valid JSON"),
        (ConstraintSpec(json_schema=nested_schema(100)), ConstraintTooDeepError,
         f"nests 201 levels of objects and arrays, over the limit of {MAX_JSON_DEPTH}"),
        (ConstraintSpec(json_schema="[" * 20000 + "]" * 20000), ConstraintTooDeepError,
         r"JSON schema nests more than \d+ levels"),
        (ConstraintSpec(structural_tag="[" * 100 + "]" * 100), ConstraintTooDeepError, "structural tag nests 100"),
        (ConstraintSpec(json_schema={"properties": {"a": {"$ref": "#/definitions/missing"}}}),
         UnresolvedReferenceError, "'#/definitions/missing' does not resolve: no location '/definitions/missing'"),
        (ConstraintSpec(json_schema={"items": {"$ref": "#thing"}, "$defs": {"x": {"$anchor": "other"}}}),
         UnresolvedReferenceError, "no \\$anchor 'thing'"),
        (ConstraintSpec(json_schema={"$ref": "https://example.com/person.json"}), UnresolvedReferenceError,
         "names a schema outside this one.*remote schemas are not fetched"),
        (ConstraintSpec(json_schema={"$id": "https://example.com/root.json", "properties": {
            "a": {"$id": "inner.json", "$ref": "#/$defs/x"}}, "$defs": {"x": {}}}),  # '#' is inner.json here
         UnresolvedReferenceError, "'#/\\$defs/x' does not resolve"),
    ],
)
def test_bad_input_gets_its_specific_error(constraint, error, message):
    with pytest.raises(error, match=message):
        check_constraint(constraint, LIMIT)


@pytest.mark.parametrize(
    "schema",
    [
        {"minimum": 5, "maximum": 3},  # no type: strings and objects still satisfy it
        {"type": ["integer", "string"], "minimum": 5, "maximum": 3},
        {"type": "object", "properties": {"a": {"enum": []}}},  # a is optional
        {"anyOf": [{"enum": []}, {"type": "string"}]},
        {"$schema": "http://json-schema.org/draft-04/schema#",  # draft 4: exclusiveMinimum is a boolean
         "type": "number", "exclusiveMinimum": True, "minimum": 1, "maximum": 2},
        {"type": "string", "pattern": "\\p{L}+"},  # an escape Python lacks, left to the backends
        nested_schema((MAX_JSON_DEPTH - 1) // 2),
        {"$id": "https://example.com/root.json", "properties": {  # references as JSON Schema resolves them
            "a": {"$ref": "#/$defs/x"}, "b": {"$ref": "#named"}, "c": {"$ref": "root.json#/$defs/x"},
            "d": {"$id": "inner.json", "$defs": {"y": {}}, "items": {"$ref": "#/$defs/y"}},
            "e": {"$ref": "inner.json#/$defs/y"}, "f": {"$ref": "#"}},
         "$defs": {"x": {"$anchor": "named", "type": "integer"}}},
        {"definitions": {"a/b": {"type": "integer"}, "%25": {}}, "items": [{"$ref": "#/definitions/a~1b"}],
         "additionalItems": {"$ref": "#/definitions/%2525"}, "$schema": "http://json-schema.org/draft-07/schema#"},
    ],
)
def test_satisfiable_schemas_pass(schema):
    check_constraint(ConstraintSpec(json_schema=schema), LIMIT)
    check_constraint(ConstraintSpec(regex="\\p{L}+"), LIMIT)


@pytest.mark.filterwarnings("ignore::FutureWarning")
def test_every_benchmark_schema_with_a_valid_instance_passes():
    """Soundness against data: a schema that some instance satisfies is never called unsatisfiable."""
    checked = 0
    for path in sorted(SCHEMAS.glob("*.json")):
        record = json.loads(path.read_text())
        valid = [t["data"] for t in record["tests"] if t["valid"]]
        validator = jsonschema.validators.validator_for(record["schema"])(record["schema"])
        if not valid or not validator.is_valid(valid[0]):
            continue
        check_constraint(ConstraintSpec(json_schema=record["schema"]), LIMIT)
        checked += 1
    if not checked:
        pytest.skip(f"no schemas under {SCHEMAS}")
    assert checked > 100


@settings(max_examples=40, deadline=None)
@given(st.recursive(st.none() | st.booleans() | st.integers(), lambda inner: (
    st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=2), inner, max_size=3))))
def test_json_depth_counts_levels_like_a_recursive_reference(value):
    def reference(item):
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else None
        return 0 if children is None else 1 + max(map(reference, children), default=0)

    assert json_depth(value) == reference(value)


@pytest.mark.parametrize("levels", [MAX_JSON_DEPTH // 2 - 1, 100])
def test_depth_limit_leaves_room_below_where_the_metaschema_check_recurses_too_deeply(levels):
    """The limit holds the schemas ``jsonschema`` can still check (it raises RecursionError at 100 levels)."""
    schema = nested_schema(levels)
    validator = jsonschema.validators.validator_for(schema)
    if levels < MAX_JSON_DEPTH:
        validator.check_schema(schema)
    else:
        with pytest.raises(RecursionError):
            validator.check_schema(schema)


def test_dangling_refs_agree_with_jsonschema_resolving_them():
    """Where the check finds a dangling $ref, jsonschema fails to resolve it when validating."""
    from referencing.exceptions import Unresolvable

    schema = {"type": "object", "properties": {"a": {"$ref": "#/$defs/gone"}}, "$defs": {"here": {}}}
    with pytest.raises(Unresolvable):
        jsonschema.validate({"a": 1}, schema)
    with pytest.raises(UnresolvedReferenceError):
        check_constraint(ConstraintSpec(json_schema=schema), LIMIT)


def test_contradiction_reads_exclusive_bounds():
    assert contradiction({"type": "number", "exclusiveMinimum": 2, "exclusiveMaximum": 2})
    assert contradiction({"type": "number", "minimum": 2, "exclusiveMaximum": 2})
    assert contradiction({"type": "number", "minimum": 2, "maximum": 2}) is None


@settings(max_examples=60, deadline=None)
@given(capacity=st.integers(0, 12), weights=st.lists(st.integers(0, 5), min_size=7, max_size=7),
       keys=st.lists(st.integers(0, 6), max_size=40))
def test_lru_cache_matches_a_reference_model(capacity, weights, keys):
    """Bounded by the sum of its values' weights: the least recently used go first, one heavier than the
    capacity is never kept."""
    cache: LRUCache[str] = LRUCache(capacity, lambda value: weights[int(value[1:])])
    model: OrderedDict[int, str] = OrderedDict()
    computed = 0
    for key in keys:
        value, hit = cache.get_or_compute(key, lambda k=key: f"v{k}")
        assert value == f"v{key}"
        assert hit == (key in model)
        if key in model:
            model.move_to_end(key)
        else:
            computed += 1
            if weights[key] <= capacity:
                model[key] = value
                while sum(weights[k] for k in model) > capacity:
                    model.popitem(last=False)
        assert cache.keys() == list(model)
        assert cache.stats.weight == sum(weights[k] for k in model) <= capacity
    assert cache.stats.misses == computed and cache.stats.hits == len(keys) - computed


def test_lru_cache_does_not_keep_failures():
    cache: LRUCache[int] = LRUCache(2, lambda value: 1)

    def boom() -> int:
        raise ValueError("no")

    with pytest.raises(ValueError, match="no"):
        cache.get_or_compute("k", boom)
    assert cache.get_or_compute("k", lambda: 1) == (1, False)
