"""Shared kit for streaming parsers (tool-call and reasoning): fixtures, streaming, odd input.

Both parser kits compare messages in one normal form, :class:`Message`. A plugin supplies
fixtures (``cases``); the kit checks ``extract`` against them, then feeds each fixture's text through
``extract_delta`` in chunks (one character at a time, and at split points chosen by hypothesis),
merges the deltas and requires the same message as ``extract``. Finally it throws text made of
pieces of the fixtures, the plugin's ``markers`` and random characters at both paths, which must
never raise.
"""

from __future__ import annotations

import codecs
import itertools
import json
from collections.abc import Iterable, Sequence
from typing import Any, ClassVar

import attrs
from hypothesis import given
from hypothesis import strategies as st

from pyagent_core.interfaces.tool_parser import DeltaMessage, StreamingParser
from pyagent_core.testing.base import BackendConformance
from pyagent_core.testing.support import kit_settings


@attrs.frozen
class Message:
    """A parsed message in comparable form; ``calls`` are ``(name, arguments)`` pairs where the
    arguments are JSON text, or the decoded JSON value after :meth:`decoded`."""

    content: str = ""
    reasoning: str = ""
    calls: tuple[tuple[str, Any], ...] = ()

    def decoded(self, label: str) -> Message:
        """This message with every call's arguments decoded from JSON text."""
        calls = []
        for name, arguments in self.calls:
            try:
                calls.append((name, json.loads(arguments)))
            except (TypeError, ValueError):
                raise AssertionError(f"{label}: arguments of {name!r} are not JSON: {arguments!r}") from None
        return attrs.evolve(self, calls=tuple(calls))


def merge_deltas(deltas: Iterable[DeltaMessage | None], label: str) -> Message:
    """Concatenate streamed deltas into a :class:`Message`, checking the tool-call fragment rules:
    calls are numbered 0, 1, ... in order; a call's first fragment, and only it, has id and name."""
    content: list[str] = []
    reasoning: list[str] = []
    calls: list[tuple[str, str]] = []
    for delta in deltas:
        if delta is None:
            continue
        assert isinstance(delta, DeltaMessage), f"{label}: extract_delta returned {delta!r}"
        content.append(delta.content or "")
        reasoning.append(delta.reasoning_content or "")
        for fragment in delta.tool_calls:
            index = fragment.index
            if index == len(calls):
                assert fragment.id and fragment.name, f"{label}: call {index} starts without id or name"
                calls.append((fragment.name, fragment.arguments))
                continue
            assert 0 <= index < len(calls), f"{label}: call index {index} out of order ({len(calls)} so far)"
            assert fragment.id is None and fragment.name is None, (
                f"{label}: a later fragment of call {index} repeats its id or name"
            )
            calls[index] = (calls[index][0], calls[index][1] + fragment.arguments)
    return Message("".join(content), "".join(reasoning), tuple(calls))


def stream(parser: StreamingParser[Any], text: str, cuts: Iterable[int], label: str) -> Message:
    """Feed ``text`` to a reset ``parser`` in chunks ending at ``cuts`` (sorted; repeats give empty
    chunks), call ``finish`` and merge everything it emitted."""
    parser.reset()
    bounds = [0, *sorted(cuts), len(text)]
    deltas = [parser.extract_delta(text[:lo], text[lo:hi]) for lo, hi in itertools.pairwise(bounds)]
    deltas.append(parser.finish(text))
    return merge_deltas(deltas, label)


def byte_cut_points(data: st.DataObject, text: str) -> list[int]:
    """Chunk boundaries of ``text`` as a detokenizer produces them from a byte stream cut anywhere.

    The UTF-8 bytes are cut at hypothesis-chosen points (inside multi-byte characters too) and
    decoded incrementally; a piece ending inside a character yields nothing until the character
    completes, so the text chunks can be empty.
    """
    raw = text.encode("utf-8")
    cuts = sorted(data.draw(st.lists(st.integers(0, len(raw)), max_size=min(len(raw), 12)), label="byte cuts"))
    decoder = codecs.getincrementaldecoder("utf-8")()
    bounds, length = [], 0
    for lo, hi in itertools.pairwise([0, *cuts, len(raw)]):
        length += len(decoder.decode(raw[lo:hi]))
        bounds.append(length)
    return bounds[:-1]


def odd_texts(sources: Sequence[str]) -> st.SearchStrategy[str]:
    """Text glued from slices of ``sources`` (fixtures, markers) and random characters."""
    slices = st.sampled_from(sources).flatmap(
        lambda s: st.tuples(st.integers(0, len(s)), st.integers(0, len(s))).map(lambda ab: s[min(ab):max(ab)])
    )
    return st.lists(st.one_of(slices, st.text(max_size=4)), max_size=8).map("".join)


def cut_points(data: st.DataObject, text: str) -> list[int]:
    """Hypothesis-chosen chunk boundaries inside ``text``."""
    return data.draw(st.lists(st.integers(0, len(text)), max_size=min(len(text), 12)), label="cuts")


class StreamingParserConformance(BackendConformance):
    """Base of the tool-call and reasoning parser kits.

    Subclasses define :meth:`make_parser` (``impl(options, context)`` with the kind's context),
    :meth:`extracted` (``extract`` in normal form) and :meth:`expected` (a fixture in normal form).
    Plugins set ``cases`` and may set ``markers`` (their special strings, e.g.
    ``("<think>", "</think>")``) to sharpen the odd-input check.
    """

    cases: ClassVar[Sequence[Any]] = ()
    markers: ClassVar[tuple[str, ...]] = ()

    def make_parser(self) -> StreamingParser[Any]:
        """Construct the parser under test: ``impl(options, context)``."""
        raise NotImplementedError

    def extracted(self, parser: StreamingParser[Any], text: str) -> Message:
        """``extract(text)`` of ``parser`` as a :class:`Message` (arguments as JSON text)."""
        raise NotImplementedError

    def expected(self, case: Any) -> Message:
        """The message a fixture expects (arguments decoded)."""
        raise NotImplementedError

    def streamable(self, case: Any) -> bool:
        """Whether streaming must reproduce ``extract`` for ``case`` (default: always)."""
        return True

    def check_stream(self, case: Any, cuts: Iterable[int]) -> None:
        """Streaming ``case.text`` with ``cuts`` gives the same message as ``extract``."""
        label = f"streaming {case.text!r} cut at {sorted(cuts)}"
        want = self.extracted(self.make_parser(), case.text).decoded(label)
        got = stream(self.make_parser(), case.text, cuts, label).decoded(label)
        assert got == want, f"{label}: streamed {got}, extract gave {want}"

    def test_has_cases(self) -> None:
        assert self.cases, "set `cases` to fixtures of the model output this parser handles"

    def test_extract_matches_cases(self) -> None:
        for case in self.cases:
            label = f"extract({case.text!r})"
            got = self.extracted(self.make_parser(), case.text).decoded(label)
            assert got == self.expected(case), f"{label} gave {got}, expected {self.expected(case)}"

    def test_streaming_in_one_chunk_and_by_character(self) -> None:
        for case in filter(self.streamable, self.cases):
            self.check_stream(case, [])
            self.check_stream(case, range(1, len(case.text)))

    @kit_settings(max_examples=60)
    @given(data=st.data())
    def test_streaming_at_random_split_points(self, data: st.DataObject) -> None:
        for case in filter(self.streamable, self.cases):
            self.check_stream(case, cut_points(data, case.text))

    @kit_settings(max_examples=20)
    @given(data=st.data())
    def test_streaming_split_inside_characters(self, data: st.DataObject) -> None:
        for case in filter(self.streamable, self.cases):
            self.check_stream(case, byte_cut_points(data, case.text))

    def check_never_raises(self, text: str, cuts: Sequence[int]) -> None:
        """Parsing ``text`` whole and streamed with ``cuts`` raises nothing but the kit's own assertions."""
        try:
            self.extracted(self.make_parser(), text)
            stream(self.make_parser(), text, cuts, f"streaming {text!r}")
        except AssertionError:
            raise
        except Exception as error:
            raise AssertionError(
                f"parsing {text!r} (cut at {list(cuts)}) raised {type(error).__name__}: {error}"
            ) from error

    @kit_settings(max_examples=100)
    @given(data=st.data())
    def test_odd_input_never_raises(self, data: st.DataObject) -> None:
        sources = [*self.markers, *(case.text for case in self.cases)] or [""]
        text = data.draw(odd_texts(sources), label="text")
        self.check_never_raises(text, cut_points(data, text))

    def test_fixtures_missing_a_character_never_raise(self) -> None:
        """Each fixture with one character left out (at up to 48 spread positions) parses without raising,
        whole and in chunks of five: a malformed call reached for certain, not by chance."""
        for case in self.cases:
            for cut in range(0, len(case.text), max(1, len(case.text) // 48)):
                text = case.text[:cut] + case.text[cut + 1:]
                self.check_never_raises(text, range(5, len(text), 5))
