"""Incremental detokenization: deltas add up to the full decode and never show half a character."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from pyagent_engine.models.checkpoint import Checkpoint
from pyagent_engine.models.detokenizer import REPLACEMENT_CHAR, IncrementalDetokenizer
from pyagent_engine.models.tokenizer import Tokenizer

PROPERTY_SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@pytest.fixture(scope="module")
def tokenizer(checkpoint: Checkpoint) -> Tokenizer:
    """The embedded model's tokenizer."""
    return checkpoint.tokenizer


@pytest.fixture(scope="module")
def partial_ids(tokenizer: Tokenizer) -> list[int]:
    """Tokens that are only part of a UTF-8 character (they decode alone to U+FFFD)."""
    found = [i for i in range(tokenizer.vocab_size) if REPLACEMENT_CHAR in tokenizer.decode([i])]
    assert len(found) > 100
    return found


def stream(detokenizer: IncrementalDetokenizer, ids: list[int], chunks: list[int]) -> list[str]:
    """Feed ``ids`` in chunks of the given sizes (cycled), then finish; return every delta."""
    deltas, position, sizes = [], 0, chunks or [1]
    while position < len(ids):
        size = sizes[len(deltas) % len(sizes)]
        deltas.append(detokenizer.add(ids[position : position + size]))
        position += size
    deltas.append(detokenizer.finish())
    return deltas


def check_deltas(deltas: list[str], full: str) -> None:
    """The property: deltas concatenate to ``full``; U+FFFD only where ``full`` has it."""
    assert "".join(deltas) == full
    if REPLACEMENT_CHAR not in full:
        assert not any(REPLACEMENT_CHAR in d for d in deltas)


@PROPERTY_SETTINGS
@given(data=st.data(), skip_special=st.booleans(), chunks=st.lists(st.integers(1, 4), max_size=3))
def test_random_ids(
    tokenizer: Tokenizer, partial_ids: list[int], data: st.DataObject, skip_special: bool, chunks: list[int]
) -> None:
    """Any id sequence (biased to byte tokens that split characters) streams to its full decode."""
    token = st.one_of(st.sampled_from(partial_ids), st.integers(0, tokenizer.vocab_size - 1))
    ids = data.draw(st.lists(token, max_size=40))
    detokenizer = IncrementalDetokenizer(tokenizer, skip_special_tokens=skip_special)
    deltas = stream(detokenizer, ids, chunks)
    check_deltas(deltas, tokenizer.decode(ids, skip_special_tokens=skip_special))
    assert detokenizer.text == "".join(deltas)


@PROPERTY_SETTINGS
@given(text=st.text(max_size=60), prompt=st.text(max_size=20))
def test_random_text(tokenizer: Tokenizer, text: str, prompt: str) -> None:
    """Encoded text streams, one token at a time after a prompt, to the text its ids decode to
    (the text itself, unless it has bytes this vocabulary has no token for)."""
    prompt_ids, ids = tokenizer.encode(prompt), tokenizer.encode(text)
    prompt_text = tokenizer.decode(prompt_ids)
    assume(not prompt_text.endswith(REPLACEMENT_CHAR))  # a prompt ending inside a character
    deltas = stream(IncrementalDetokenizer(tokenizer, prompt_ids), ids, [1])
    check_deltas(deltas, tokenizer.decode(prompt_ids + ids)[len(prompt_text) :])


def test_emoji_waits_for_its_last_byte(tokenizer: Tokenizer) -> None:
    """A character spread over several tokens is emitted once, whole, by the token that completes it."""
    ids = tokenizer.encode("a😀")
    assert len(ids) >= 3  # 'a' plus the emoji's byte tokens
    detokenizer = IncrementalDetokenizer(tokenizer)
    deltas = [detokenizer.add([i]) for i in ids]
    assert deltas[0] == "a" and deltas[-1] == "😀" and set(deltas[1:-1]) == {""}
    assert detokenizer.finish() == ""


def test_special_tokens_are_skipped_or_kept(tokenizer: Tokenizer) -> None:
    """skip_special_tokens decides whether <|im_end|> shows up in the text."""
    ids = [*tokenizer.encode("Hi"), 2]
    kept = IncrementalDetokenizer(tokenizer, skip_special_tokens=False)
    skipped = IncrementalDetokenizer(tokenizer)
    assert kept.add(ids) + kept.finish() == "Hi<|im_end|>"
    assert skipped.add(ids) + skipped.finish() == "Hi"


def test_incomplete_tail_is_flushed_on_finish(tokenizer: Tokenizer) -> None:
    """A sequence that stops inside a character gets its U+FFFD only from finish()."""
    ids = tokenizer.encode("x😀")[:-1]
    detokenizer = IncrementalDetokenizer(tokenizer)
    assert REPLACEMENT_CHAR not in detokenizer.add(ids)
    assert detokenizer.finish().endswith(REPLACEMENT_CHAR)
