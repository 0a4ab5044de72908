"""ObjectPrefix against json.loads: the texts it accepts, at every split, and what it releases on the way."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from parser_base_helpers import SETTINGS, cuts_of, split

from pyagent_parser_base.jsonprefix import ObjectPrefix
from pyagent_parser_base.source import Malformed


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def json_object(text: str) -> bool:
    """The reference: whether ``text`` is one JSON object (RFC 8259; Python's NaN and Infinity refused)."""
    try:
        return isinstance(json.loads(text, parse_constant=_no_constant), dict)
    except (ValueError, RecursionError):
        return False


def check(pieces: list[str]) -> tuple[str, bool]:
    """Feed ``pieces``: the text released on the way (checked to grow as a prefix) and whether it was accepted."""
    prefix, released, text = ObjectPrefix(), "", ""
    try:
        for piece in pieces:
            text += piece
            released += prefix.feed(piece)
            assert text.startswith(released), (pieces, released)
            assert not json_object(released), f"{released!r} released as a whole object before close()"
        released += prefix.close()
    except Malformed:
        return released, False
    return released, True


SCALARS = st.none() | st.booleans() | st.integers(-10**20, 10**20) | st.floats(allow_nan=False, allow_infinity=False) \
    | st.text(max_size=6)
VALUES = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner,
                                                                                            max_size=3), max_leaves=8)
OBJECTS = st.dictionaries(st.text(max_size=4), VALUES, max_size=4)
LAYOUTS = st.sampled_from([{}, {"indent": 1}, {"separators": (",", ":")}, {"ensure_ascii": False}])


@SETTINGS
@given(data=st.data(), value=OBJECTS, layout=LAYOUTS)
def test_every_json_object_is_accepted_and_released_whole(data: st.DataObject, value: Any,
                                                          layout: dict[str, Any]) -> None:
    text = json.dumps(value, **layout)
    assert check(split(text, cuts_of(data, text))) == (text, True)


EDITS = st.sampled_from(list('{}[]",:\\ \nab01-.eEtrufnl/u\x01'))


@SETTINGS
@given(data=st.data(), value=OBJECTS, at=st.integers(0, 10**6), edit=EDITS, mode=st.sampled_from(["insert", "replace",
                                                                                                   "delete", "cut"]))
def test_a_damaged_object_is_judged_as_json_loads_judges_it(data: st.DataObject, value: Any, at: int, edit: str,
                                                            mode: str) -> None:
    text = json.dumps(value, ensure_ascii=False)
    at %= len(text) + 1
    text = {"insert": text[:at] + edit + text[at:], "replace": text[:at] + edit + text[at + 1:],
            "delete": text[:at] + text[at + 1:], "cut": text[:at]}[mode]
    released, accepted = check(split(text, cuts_of(data, text)))
    assert accepted == json_object(text), (text, released)
    if accepted:
        assert released == text


@pytest.mark.parametrize("text", [
    '"hello"', '"{hello world}"', "[1]", "{invalid json}", '{"a": 1} tail text', '{"a": NaN}', '{"a": 01}',
    "{'a': 1}", '{"a": 1,}', '{"a" 1}', '{"a": "\\x"}', '{"a": "\t"}', '{"a": tru}', '{"a": 1', "",
])
def test_texts_that_are_no_json_object_are_refused(text: str) -> None:
    assert not json_object(text)
    for cuts in (range(0), range(1, len(text))):
        released, accepted = check(split(text, cuts))
        assert not accepted and not json_object(released)


def test_nothing_is_released_before_the_object_is_known_to_begin() -> None:
    prefix = ObjectPrefix()
    assert prefix.feed(" {") == ""
    assert prefix.feed(' "k": 1') == ' { "k": '  # the number may go on
    assert prefix.feed("2 , \"s\": \"ab\\") == "12 , \"s\": \"ab"  # the escape is not complete
    assert prefix.feed('u00e9"}  ') == '\\u00e9"'
    assert prefix.close() == "}  "
