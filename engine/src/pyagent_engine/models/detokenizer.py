"""Incremental detokenization: text deltas for a growing list of token ids.

A character can be split over several tokens (byte-level BPE spells a CJK character or an emoji as
two to four byte tokens), and some decoders change the text of a token by its neighbours (a
SentencePiece ``▁`` is dropped at the start of a text). So a delta is never the decode of the new
tokens alone. Instead two windows over the ids are decoded, both starting at ``prefix``:
``[prefix, read)``, the tokens whose text was already emitted last time, and ``[prefix, end)``;
the delta is what the second adds to the first. It is held back while the text ends in U+FFFD (a
character still incomplete), and the windows move forward once it is emitted, so each step decodes
a handful of tokens whatever the length of the sequence.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from pyagent_engine.models.tokenizer import Tokenizer

#: Prompt tokens decoded as context for the first delta (enough to settle a split character or a
#: decoder's dependence on the previous token).
PROMPT_CONTEXT_TOKENS = 5

REPLACEMENT_CHAR = "\ufffd"


class IncrementalDetokenizer:
    """Turns the output token ids of one sequence, as they arrive, into text deltas.

    Concatenated, the deltas of :meth:`add` and the final :meth:`finish` equal the decode of the
    prompt and output ids together, minus the prompt's text. A delta never ends in the middle of a
    character: bytes of an incomplete UTF-8 sequence are held back until the character is complete
    (or until :meth:`finish`, which flushes whatever is left, invalid bytes as U+FFFD).

    Args:
        tokenizer: the model's tokenizer.
        prompt_ids: the ids the output continues (decoded only as context for the first delta).
        skip_special_tokens: leave special tokens (``<|im_end|>``) out of the text.
    """

    def __init__(
        self, tokenizer: Tokenizer, prompt_ids: Sequence[int] = (), *, skip_special_tokens: bool = True
    ) -> None:
        self._tokenizer = tokenizer
        self._skip_special = skip_special_tokens
        self._ids = list(prompt_ids[-PROMPT_CONTEXT_TOKENS:])
        self._prefix = 0
        self._read = len(self._ids)
        self.text = ""
        """All the text emitted so far."""

    def add(self, token_ids: Iterable[int]) -> str:
        """Append ``token_ids``; return the text they complete (possibly ``""``)."""
        self._ids.extend(token_ids)
        return self._advance(final=False)

    def finish(self) -> str:
        """Return the text still held back (an incomplete character decodes as U+FFFD)."""
        return self._advance(final=True)

    def _advance(self, final: bool) -> str:
        decode = self._tokenizer.decode
        emitted = decode(self._ids[self._prefix : self._read], skip_special_tokens=self._skip_special)
        current = decode(self._ids[self._prefix :], skip_special_tokens=self._skip_special)
        if len(current) <= len(emitted) or (current.endswith(REPLACEMENT_CHAR) and not final):
            return ""
        delta = current[len(emitted) :]
        self._prefix, self._read = self._read, len(self._ids)
        self.text += delta
        return delta
