"""Option specs: shorthand, conversion from strings, and property tests against Python's parsers."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pyagent_core.errors import OptionError
from pyagent_core.options import OptionSpec, parse_assignments, to_option_spec, validate_options


def test_shorthand_type_becomes_spec():
    assert to_option_spec("k", int) == OptionSpec(type=int)
    with pytest.raises(OptionError, match="must be declared as a type"):
        to_option_spec("k", 3)


def test_unsupported_type_is_rejected():
    with pytest.raises(OptionError, match="not supported"):
        OptionSpec(type=list)


@given(st.integers())
def test_int_strings_round_trip(value):
    assert OptionSpec(type=int).convert("k", str(value), "x") == value


@given(st.floats(allow_nan=False))
def test_float_strings_round_trip(value):
    assert OptionSpec(type=float).convert("k", repr(value), "x") == value


@given(st.booleans())
def test_bool_is_not_a_number(value):
    with pytest.raises(OptionError):
        OptionSpec(type=int).convert("k", value, "x")


@pytest.mark.parametrize(("raw", "expected"), [("true", True), ("OFF", False), ("1", True), ("no", False)])
def test_bool_spellings(raw, expected):
    assert OptionSpec(type=bool).convert("k", raw, "x") is expected


def test_defaults_are_filled():
    schema = {"a": OptionSpec(type=int, default=3), "b": OptionSpec(type=str)}
    assert validate_options(schema, {"b": "x"}, "t") == {"a": 3, "b": "x"}


def test_backend_without_options_says_so():
    with pytest.raises(OptionError, match="takes no options"):
        validate_options({}, {"a": 1}, "t")


@pytest.mark.parametrize("pair", ["noequals", "=3", ""])
def test_bad_assignments(pair):
    with pytest.raises(OptionError, match="KEY=VALUE"):
        parse_assignments([pair])


def test_assignments_split_on_first_equals():
    assert parse_assignments(["expr=a=b", " k = v "]) == {"expr": "a=b", "k": "v"}
