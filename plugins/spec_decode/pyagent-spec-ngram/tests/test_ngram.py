"""The ngram proposer: conformance kit, drafts against a brute-force prompt-lookup oracle, C = Python."""

from __future__ import annotations

from typing import Any, ClassVar

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pyagent_core.errors import OptionError
from pyagent_core.interfaces.proposer import ProposerRequest
from pyagent_core.testing.proposer import ProposerConformance
from pyagent_spec_ngram.plugin import SPEC
from pyagent_spec_ngram.proposer import NgramProposer


class TestNgram(ProposerConformance):
    impl = NgramProposer
    spec = SPEC


class TestNgramPython(TestNgram):
    options: ClassVar[dict[str, Any]] = {"backend": "python", "min_n": 1, "max_n": 3}


def ngram(**options: Any) -> NgramProposer:
    """An ngram proposer built as the kit builds it, ``options`` over the spec's defaults."""
    kit = TestNgram()
    return NgramProposer(kit.make_options(**options), kit.make_context())


def lookup_oracle(history: list[int], min_n: int, max_n: int, k: int) -> list[int] | None:
    """Largest n with an earlier occurrence of the last n tokens; the latest one's continuation."""
    for n in range(min(max_n, len(history) - 1), min_n - 1, -1):
        starts = [e for e in range(len(history) - 1, n - 1, -1) if history[e - n:e] == history[-n:]]
        if starts:
            return history[starts[0]:starts[0] + k]
    return None


@settings(max_examples=120, deadline=None)
@given(prompt=st.lists(st.integers(0, 3), min_size=1, max_size=40), output=st.lists(st.integers(0, 3), max_size=20),
       min_n=st.integers(1, 3), extra=st.integers(0, 4), k=st.integers(1, 6), backend=st.sampled_from(["c", "python"]))
def test_draft_is_the_latest_continuation_of_the_longest_match(
        prompt: list[int], output: list[int], min_n: int, extra: int, k: int, backend: str) -> None:
    proposer = ngram(min_n=min_n, max_n=min_n + extra, max_tokens=64, backend=backend)
    (draft,) = proposer.propose([ProposerRequest("r", prompt, output)], k)
    expected = lookup_oracle(prompt + output, min_n, min_n + extra, k)
    assert (None if draft is None else list(draft.token_ids)) == expected
    assert draft is None or draft.is_chain()


def test_output_tokens_are_searched_as_they_arrive() -> None:
    proposer = ngram(min_n=2, max_n=4, max_tokens=3)
    output: list[int] = []
    request = ProposerRequest("r", [9, 1, 2, 3, 4, 8], output)
    assert proposer.propose([request], 3) == [None]
    output.extend([1, 2])
    (draft,) = proposer.propose([request], 3)
    assert draft is not None and draft.token_ids == (3, 4, 8)


def test_max_n_below_min_n_is_an_option_error() -> None:
    with pytest.raises(OptionError, match="max_n"):
        ngram(min_n=4, max_n=2)
