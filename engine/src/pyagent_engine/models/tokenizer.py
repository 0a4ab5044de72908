"""Text to token ids and back, over a Hugging Face ``tokenizers.Tokenizer``."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from tokenizers import Tokenizer as BackendTokenizer

from pyagent_core.text import check_text


class Tokenizer:
    """A model's tokenizer: ``encode``/``decode`` on plain lists of ids.

    Args:
        backend: the ``tokenizers.Tokenizer`` (built from GGUF metadata or read from
            ``tokenizer.json``).
    """

    def __init__(self, backend: BackendTokenizer) -> None:
        self.backend = backend
        self._plain: BackendTokenizer | None = None  # a copy that reads special tokens as text

    @classmethod
    def from_file(cls, path: Path) -> Tokenizer:
        """Read a ``tokenizer.json``."""
        return cls(BackendTokenizer.from_file(str(path)))

    def save(self, path: Path) -> None:
        """Write this tokenizer as a ``tokenizer.json``."""
        self.backend.save(str(path))

    @property
    def vocab_size(self) -> int:
        """Number of token ids, added tokens included."""
        return int(self.backend.get_vocab_size(with_added_tokens=True))

    def encode(self, text: str, *, add_special_tokens: bool = True, parse_special: bool = True) -> list[int]:
        """Token ids of ``text``; special tokens written in the text (``<|im_start|>``) stay whole.

        ``add_special_tokens`` applies the tokenizer's post-processor (a ``BOS`` for models that
        want one); pass ``False`` for text a chat template already rendered. ``parse_special=False``
        tokenizes special tokens written in the text as plain text (llama.cpp's ``parse_special``).

        Raises:
            RequestError: ``text`` is not whole Unicode (a lone surrogate), which no tokenizer takes.
        """
        check_text(text, "the text to tokenize")
        backend = self.backend if parse_special else self._plain_backend()
        return list(backend.encode(text, add_special_tokens=add_special_tokens).ids)

    def _plain_backend(self) -> BackendTokenizer:
        """A copy of the tokenizer that splits special tokens like any text (built on first use)."""
        if self._plain is None:
            plain = BackendTokenizer.from_str(self.backend.to_str())
            plain.encode_special_tokens = True
            self._plain = plain
        return self._plain

    def decode(self, ids: Sequence[int], *, skip_special_tokens: bool = False) -> str:
        """Text of ``ids``; bytes that do not form complete UTF-8 characters become U+FFFD."""
        return str(self.backend.decode(list(ids), skip_special_tokens=skip_special_tokens))

    def id_to_token(self, token_id: int) -> str | None:
        """The vocabulary entry of ``token_id`` (as the model spells it), or ``None``."""
        token = self.backend.id_to_token(token_id)
        return None if token is None else str(token)
