"""The suspending readers: the same result however the text is split, checked against ``str.find`` and ``re``."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st
from parser_base_helpers import SETTINGS, cuts_of, feed_reader, split

from pyagent_parser_base.source import (
    Malformed,
    Source,
    Truncated,
    expect,
    held_back,
    read_match,
    read_until,
    stream_until,
)

STOPS = ("<a>", "</a>", "<a", "a>>")
TEXTS = st.text(alphabet="<>/a b\n", max_size=30)


def earliest_stop(text: str, stops: tuple[str, ...]) -> tuple[int, str] | None:
    """Where the first stop starts in ``text`` and which (the longest one on a tie), by ``str.find``."""
    found = [(text.find(s), -len(s), s) for s in stops if s in text]
    if not found:
        return None
    at, _, stop = min(found)
    return at, stop


@SETTINGS
@given(text=TEXTS, data=st.data())
def test_stream_until_stops_at_the_earliest_stop_and_holds_back_only_possible_stops(text: str,
                                                                                    data: st.DataObject) -> None:
    emitted: list[str] = []
    pieces = split(text, cuts_of(data, text))
    fed: list[str] = []

    def check_held_back() -> None:
        fed.append(pieces[len(fed)])
        sofar = "".join(fed)
        if earliest_stop(sofar, STOPS) is None:  # nothing decided yet: only a possible stop start is held
            shown = "".join(emitted)
            assert sofar.startswith(shown)
            assert len(sofar) - len(shown) == held_back(sofar, 0, STOPS) < max(map(len, STOPS))

    box = feed_reader(lambda src: stream_until(src, STOPS, emitted.append), pieces, after=check_held_back)
    expected = earliest_stop(text, STOPS)
    if expected is None:
        assert (box["value"], "".join(emitted), box["rest"]) == (None, text, "")
    else:
        at, stop = expected
        assert (box["value"], "".join(emitted), box["rest"]) == (stop, text[:at], text[at + len(stop):])


@SETTINGS
@given(text=TEXTS, data=st.data(), consume=st.booleans())
def test_read_until_returns_the_text_before_the_stop(text: str, data: st.DataObject, consume: bool) -> None:
    box = feed_reader(lambda src: read_until(src, STOPS, "a test", consume=consume), split(text, cuts_of(data, text)))
    expected = earliest_stop(text, STOPS)
    if expected is None:
        assert isinstance(box["error"], Truncated) and "the text ends inside a test" in str(box["error"])
    else:
        at, stop = expected
        assert box["value"] == (text[:at], stop)
        assert box["rest"] == text[at + (len(stop) if consume else 0):]


@SETTINGS
@given(digits=st.text(alphabet="0123456789", min_size=1, max_size=12), tail=st.sampled_from(["", " x", "x"]),
       data=st.data())
def test_read_match_takes_the_longest_match_even_when_split(digits: str, tail: str, data: st.DataObject) -> None:
    text = " " + digits + tail
    box = feed_reader(lambda src: read_match(src, re.compile(r"\d+"), "a number"), split(text, cuts_of(data, text)))
    assert (box["value"], box["rest"]) == (re.search(r"\d+", text).group(), tail)  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("text", "failure", "message"),
    [("  <tool", Truncated, "the text ends where '<tool>' (the opener) should follow"),
     ("  <tag>", Malformed, "expected '<tool>' (the opener) but found '<ta"),
     ("", Truncated, "the text ends where")],
)
def test_expect_tells_a_truncated_text_from_a_wrong_one(text: str, failure: type, message: str) -> None:
    for pieces in ([text], list(text)):
        box = feed_reader(lambda src: expect(src, "<tool>", "the opener"), pieces)
        assert isinstance(box["error"], failure) and message in str(box["error"])


def test_expect_consumes_the_literal_after_whitespace() -> None:
    assert feed_reader(lambda src: expect(src, "<tool>", "the opener"), [" \n<to", "ol>rest"]) == {
        "value": None, "rest": "rest"}


def test_compact_drops_read_text_but_keeps_the_anchored_part() -> None:
    src = Source()
    src.feed("x" * 10_000 + "tail")
    src.pos, src.anchor = 9_000, 8_500
    src.compact()
    assert (src.buf, src.pos, src.anchor) == ("x" * 1_500 + "tail", 500, 0)
    src.anchor = None
    src.compact()  # less than the threshold was read since: nothing moves
    assert (src.buf[src.pos:], src.pos) == ("x" * 1_000 + "tail", 500)
