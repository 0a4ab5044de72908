"""The incremental JSON readers against ``json.dumps``/``json.loads``, however the text is split."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from parser_base_helpers import SETTINGS, cuts_of, feed_reader, split

from pyagent_parser_base.emitter import Emitter, ToolSet
from pyagent_parser_base.jsonscan import call_list, call_object, json_container, json_skip, json_string
from pyagent_parser_base.machine import Run
from pyagent_parser_base.source import Malformed, Truncated

TEXT = st.text(st.characters(exclude_categories=["Cs"]), max_size=12)
JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | TEXT,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(TEXT, inner, max_size=3), max_leaves=8,
)


@SETTINGS
@given(value=TEXT, ascii_only=st.booleans(), data=st.data())
def test_json_string_decodes_like_json_loads(value: str, ascii_only: bool, data: st.DataObject) -> None:
    text = f"  {json.dumps(value, ensure_ascii=ascii_only)}, next"
    box = feed_reader(lambda src: json_string(src, "a string"), split(text, cuts_of(data, text)))
    assert (box["value"], box["rest"]) == (value, ", next")


@SETTINGS
@given(value=st.dictionaries(TEXT, JSON, max_size=4) | st.lists(JSON, max_size=4), indent=st.sampled_from([None, 1]),
       data=st.data())
def test_json_container_passes_the_text_on_verbatim_up_to_its_close(value: Any, indent: int | None,
                                                                    data: st.DataObject) -> None:
    written = json.dumps(value, ensure_ascii=False, indent=indent)
    text = written + "]} tail"
    pieces: list[str] = []
    box = feed_reader(lambda src: json_container(src, pieces.append, "the arguments"), split(text, cuts_of(data, text)))
    assert ("".join(pieces), box["rest"]) == (written, "]} tail")


@SETTINGS
@given(value=JSON, data=st.data())
def test_json_skip_reads_past_any_value(value: Any, data: st.DataObject) -> None:
    text = json.dumps(value) + ";rest"
    assert feed_reader(lambda src: json_skip(src, "a value"), split(text, cuts_of(data, text)))["rest"] == ";rest"


@pytest.mark.parametrize(
    ("text", "failure"),
    [('["unterminated', Truncated), ('"a string"', Malformed), ('{"a": [1, 2}', Malformed), ('{"a": 1', Truncated),
     ("[1, 2] ", None)],
)
def test_json_container_failures(text: str, failure: type | None) -> None:
    box = feed_reader(lambda src: json_container(src, lambda _: None, "the arguments"), [text])
    assert type(box.get("error")) is (failure or type(None))


def calls_in(text: str, body: Any = call_object, tools: tuple[dict[str, Any], ...] = ()) -> tuple[Any, ...]:
    """The calls ``(name, decoded arguments)`` that ``body`` reads in ``text`` fed in 3-character pieces, and
    how many errors."""
    def program(src: Any, out: Emitter) -> Any:
        try:
            yield from body(src, out)
        except (Malformed, Truncated) as failure:
            out.fail(str(failure))

    run = Run(program, Emitter(ToolSet(tools)))
    for start in range(0, len(text), 3):
        run.feed(text[start:start + 3])
    run.close()
    result = run.emitter.result()
    return tuple((c.name, json.loads(c.arguments)) for c in result.tool_calls), len(result.errors)


@pytest.mark.parametrize(
    ("text", "calls"),
    [('{"name": "f", "arguments": {"a": [1, {"b": "}"}]}}', [("f", {"a": [1, {"b": "}"}]})]),
     ('{"arguments": {"a": 1}, "id": 7, "name": "f"}', [("f", {"a": 1})]),
     ('{"name": "f", "parameters": "{\\"a\\": 1}"}', [("f", {"a": 1})]),
     ('{"name": "f"}', [("f", {})])],
)
def test_call_object_in_any_key_order(text: str, calls: list[tuple[str, Any]]) -> None:
    assert calls_in(text) == (tuple(calls), 0)


def test_call_list_and_its_failures() -> None:
    assert calls_in('[{"name": "f", "arguments": {}}, {"name": "g", "arguments": {"x": 1}}]', call_list) == (
        (("f", {}), ("g", {"x": 1})), 0)
    assert calls_in("[]", call_list) == ((), 0)
    assert calls_in('{"arguments": {}}') == ((), 1)  # no name
    assert calls_in('{"name": "f", "arguments": {"a": 1}') == ((), 1)  # truncated: the started call is dropped
