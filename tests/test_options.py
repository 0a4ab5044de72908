"""Option specs: shorthand, conversion from strings, and property tests against Python's parsers."""

from __future__ import annotations

import re

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


# --- token ids, sequences, biases and strings (sampler parameters declared with request=True) ---

IDS = st.lists(st.integers(min_value=0, max_value=2**31), max_size=8)


@given(IDS)
def test_token_id_text_round_trips(ids):
    spec = OptionSpec(type=list[int])
    assert spec.convert("k", ",".join(map(str, ids)), "x") == ids == spec.from_cli("--k", [", ".join(map(str, ids))])
    assert spec.convert("k", ids, "x") == ids and spec.type_name == "list[int]" and not spec.repeatable


@given(st.lists(IDS.filter(bool), min_size=1, max_size=4))
def test_token_sequences_take_one_flag_per_sequence_or_semicolons(sequences):
    spec = OptionSpec(type=list[list[int]])
    texts = [",".join(map(str, seq)) for seq in sequences]
    assert spec.from_cli("--k", texts) == sequences == spec.convert("k", ";".join(texts), "x")
    assert spec.repeatable


@given(st.dictionaries(st.integers(min_value=0, max_value=10**6),
                       st.floats(min_value=-100, max_value=100, allow_nan=False), max_size=5))
def test_token_biases_from_flags_tables_and_json_bodies(biases):
    spec = OptionSpec(type=dict[int, float])
    texts = [f"{token}={bias!r}" for token, bias in biases.items()]
    assert spec.from_cli("--k", texts) == biases
    assert spec.convert("k", {str(t): b for t, b in biases.items()}, "x") == biases  # a TOML table's string keys


@pytest.mark.parametrize(("texts", "expected"), [
    (["\\n", "###", "\\x41b"], ["\n", "###", "Ab"]),
    (["none"], []),
    (["a\\q"], ["a\\q"]),  # an unknown escape stays as written
])
def test_string_flags_read_escapes_and_none(texts, expected):
    assert OptionSpec(type=list[str]).from_cli("--k", texts) == expected


@pytest.mark.parametrize(("spec", "texts", "message"), [
    (OptionSpec(type=list[int]), ["1,x"], "--k takes comma-separated token ids such as 1,2,3; got '1,x'"),
    (OptionSpec(type=dict[int, float]), ["15"], "--k takes one TOKEN_ID=BIAS such as 15=-5 per flag"),
    (OptionSpec(type=list[list[int]]), ["1", "a"], "--k takes one token id sequence"),
    (OptionSpec(type=list[str]), ["none", "x"], "non-empty strings, or 'none' alone"),
    (OptionSpec(type=list[str]), [""], "non-empty strings"),
    (OptionSpec(type=float), ["1", "2"], "--k takes one value, got 2"),
])
def test_malformed_flag_values_name_the_flag_and_the_form(spec, texts, message):
    with pytest.raises(OptionError, match=re.escape(message)):
        spec.from_cli("--k", texts)


def test_containers_refuse_bounds_and_wrong_items():
    with pytest.raises(OptionError, match="no bounds"):
        OptionSpec(type=list[int], min=0)
    with pytest.raises(OptionError, match=r"expects list\[int\], got \[1, True\]; write e.g. k=1,2,3"):
        OptionSpec(type=list[int]).convert("k", [1, True], "x")
    with pytest.raises(OptionError, match=r"expects dict\[int, float\]"):
        OptionSpec(type=dict[int, float]).convert("k", {"a": 1.0}, "x")


def test_request_help_falls_back_to_help():
    assert OptionSpec(type=float, help="engine default", request=True).parameter_help == "engine default"
    assert OptionSpec(type=float, help="h", request=True, request_help="per request").parameter_help == "per request"
