"""Stop strings and stream deltas, against a brute-force oracle; sampling-parameter validation."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pyagent_core.errors import RequestError
from pyagent_engine.requests.params import SamplingParams
from pyagent_engine.stages.text_tracker import TextTracker, held_back


class CharTokenizer:
    """One token per character: token id = code point (enough to test stop handling)."""

    def decode(self, ids, skip_special_tokens=False):
        return "".join(map(chr, ids))


def run(text: str, stops: tuple[str, ...]) -> tuple[str, str, bool]:
    tracker = TextTracker(CharTokenizer(), [], stops)  # type: ignore[arg-type]
    streamed = ""
    for char in text:
        tracker.add(ord(char))
        streamed += tracker.delta(final=False)
        if tracker.stopped:
            break
    tracker.finish()
    streamed += tracker.delta(final=True)
    return tracker.text, streamed, tracker.stopped


def oracle(text: str, stops: tuple[str, ...]) -> tuple[str, bool]:
    """Generation stops at the first position where some stop string has fully appeared."""
    for end in range(1, len(text) + 1):
        hits = [text.find(s) for s in stops if s in text[:end]]
        if hits:
            return text[: min(hits)], True
    return text, False


@given(st.text(alphabet="abc\n", max_size=30), st.lists(st.text(alphabet="abc\n", min_size=1, max_size=4),
                                                        max_size=3))
def test_stop_strings_match_the_oracle_and_stream_equals_final(text, stops):
    final, streamed, stopped = run(text, tuple(stops))
    expected, expected_stop = oracle(text, tuple(stops))
    assert (final, stopped) == (expected, expected_stop)
    assert streamed == final


@given(st.text(alphabet="ab", max_size=12), st.lists(st.text(alphabet="ab", min_size=1, max_size=4), max_size=3))
def test_held_back_is_the_longest_stop_prefix_suffix(text, stops):
    expected = max([k for s in stops for k in range(1, len(s)) if text.endswith(s[:k])], default=0)
    assert held_back(text, stops) == expected


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"max_tokens": 0}, "max_tokens must be a positive integer"),
        ({"temperature": -1}, "temperature must be a finite number >= 0"),
        ({"temperature": float("nan")}, "temperature"),
        ({"top_p": 1.5}, r"top_p must be in \[0, 1\]"),
        ({"top_k": -2}, "top_k must be an integer >= 0"),
        ({"seed": -1}, "seed must be an integer"),
        ({"stop": ("",)}, "stop must be non-empty strings"),
        ({"stop_token_ids": (-3,)}, "stop_token_ids"),
    ],
)
def test_bad_sampling_params(kwargs, message):
    with pytest.raises(RequestError, match=message):
        SamplingParams(**kwargs)


def test_sampler_params_carry_extras():
    params = SamplingParams(temperature=0.5, extra={"min_p": 0.1})
    assert params.sampler_params()["min_p"] == 0.1 and not params.greedy
    assert SamplingParams(temperature=0).greedy
