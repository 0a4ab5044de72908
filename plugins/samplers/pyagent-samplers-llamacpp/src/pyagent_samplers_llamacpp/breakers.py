"""DRY's sequence breakers: llama.cpp's strings turned into the token sequences the sampler matches.

A breaker string stops repeats at text, not at a token: ``"\\n"`` must break at every token whose
text holds a newline (``".\\n"``, ``"\\n\\n"``...), and ``"###"`` where the model wrote ``"#"`` then
``"##"``. llama.cpp (``get_overlapping_token_sequences`` in ``src/llama-sampling.cpp``, from
koboldcpp) scans the vocabulary once per breaker string and keeps, per *head* token, the *tails*
that complete the breaker after it:

- a token whose bytes contain the whole string is a breaker on its own (empty tail);
- a token whose bytes end with a proper prefix of the string (that prefix starting at a byte equal
  to the string's first byte) is the head of a multi-token breaker: the tail is the tokenization of
  the rest of the string, cut to :data:`MAX_TAIL_TOKENS` tokens.

Strings are cut to their first :data:`MAX_BREAKER_BYTES` bytes of UTF-8 first. Where llama.cpp
tokenizes a rest that starts inside a multi-byte character (stray continuation bytes), a tokenizer
of text cannot: such heads are left out, so only overlaps that split the string between characters
make multi-token breakers.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence

# llama.cpp's defaults (common_params_sampling::dry_sequence_breakers): newline, colon, quote, asterisk.
DEFAULT_SEQUENCE_BREAKERS: tuple[str, ...] = ("\n", ":", '"', "*")
# Limits of llama_sampler_init_dry: breaker strings are cut to 40 bytes, tails to 20 tokens.
MAX_BREAKER_BYTES = 40
MAX_TAIL_TOKENS = 20

BreakerTable = dict[int, set[tuple[int, ...]]]
"""Head token id -> the tails (token id tuples, ``()`` for a one-token breaker) completing a breaker."""


def string_breakers(text: str, vocab: Sequence[bytes], encode: Callable[[str], list[int]]) -> BreakerTable:
    """The heads and tails of breaker ``text`` over ``vocab`` (each token id's bytes), as llama.cpp
    builds them (module docstring); ``encode`` tokenizes a tail without special tokens."""
    breaker = text.encode("utf-8")[:MAX_BREAKER_BYTES]
    first = breaker[:1]
    table: BreakerTable = {}
    tails: dict[bytes, tuple[int, ...] | None] = {}
    for token_id, word in enumerate(vocab):
        if breaker in word:
            table.setdefault(token_id, set()).add(())
            continue
        start = word.find(first, max(0, len(word) - len(breaker) + 1))
        while start != -1:
            if breaker.startswith(word[start:]):
                rest = breaker[len(word) - start:]
                if rest not in tails:
                    tails[rest] = _tokenize(rest, encode)
                tail = tails[rest]
                if tail is not None:
                    table.setdefault(token_id, set()).add(tail)
            start = word.find(first, start + 1)
    return table


def _tokenize(rest: bytes, encode: Callable[[str], list[int]]) -> tuple[int, ...] | None:
    """The token ids of ``rest`` (at most :data:`MAX_TAIL_TOKENS`), or ``None`` when it does not
    start on a character boundary."""
    try:
        text = rest.decode("utf-8")
    except UnicodeDecodeError:
        return None
    return tuple(int(t) for t in encode(text)[:MAX_TAIL_TOKENS])


def sequence_breakers(sequences: Iterable[Sequence[int]]) -> BreakerTable:
    """The table of breakers given as token id sequences: the first id is the head, the rest the tail."""
    table: BreakerTable = {}
    for sequence in sequences:
        table.setdefault(int(sequence[0]), set()).add(tuple(int(t) for t in sequence[1:]))
    return table


def merge(tables: Iterable[Mapping[int, set[tuple[int, ...]]]]) -> BreakerTable:
    """One table holding every head and tail of ``tables``."""
    merged: BreakerTable = {}
    for table in tables:
        for head, tails in table.items():
            merged.setdefault(head, set()).update(tails)
    return merged
