"""Token bytes for grammar backends: byte-level and SentencePiece-style vocabularies, and the embedded model."""

from __future__ import annotations

import pytest
from tokenizers import Tokenizer as BackendTokenizer
from tokenizers import decoders, models, pre_tokenizers

from pyagent_core.errors import UnsupportedModelError
from pyagent_engine.models.grammar_vocab import _byte_alphabet, grammar_tokenizer_info, token_bytes
from pyagent_engine.models.tokenizer import Tokenizer

TEXTS = ("Hello, world!", '{"name": "Zoë", "tags": ["a\\n", 3]}', "naïve café — 東京 🚀", "\ttabs\r\nand\x00nul")


def test_byte_alphabet_is_the_tokenizers_byte_level_alphabet() -> None:
    alphabet = _byte_alphabet()
    assert sorted(alphabet) == sorted(pre_tokenizers.ByteLevel.alphabet())
    assert sorted(alphabet.values()) == list(range(256))


@pytest.fixture(scope="module")
def embedded() -> Tokenizer:
    from pyagent_engine.testing.grammar_corpus import embedded_tokenizer

    return embedded_tokenizer()[0]


@pytest.mark.parametrize("text", TEXTS)
def test_token_bytes_join_to_the_text(embedded: Tokenizer, text: str) -> None:
    vocab = token_bytes(embedded)
    ids = embedded.encode(text, add_special_tokens=False)
    assert b"".join(vocab[i] for i in ids) == text.encode("utf-8")


def test_embedded_info_marks_special_tokens(embedded: Tokenizer) -> None:
    info = grammar_tokenizer_info(embedded, eos_token_ids=[2], vocab_size=49160)
    assert info.vocab[2] == b"<|im_end|>" and info.eos_token_ids == (2,)
    assert 2 not in info.special_token_ids and {0, 1} <= set(info.special_token_ids)
    assert info.vocab_size == 49160 and len(info.vocab) == embedded.vocab_size
    assert info.encode is not None and info.encode("ab c") == embedded.encode("ab c", add_special_tokens=False)


def _sentencepiece_style() -> Tokenizer:
    vocab = {"<unk>": 0, "<0x0A>": 1, "<0xC3>": 2, "<0xA9>": 3, "▁a": 4, "b": 5, "▁": 6}
    backend = BackendTokenizer(models.BPE(vocab=vocab, merges=[], unk_token="<unk>", byte_fallback=True))
    backend.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse()])
    return Tokenizer(backend)


def test_sentencepiece_pieces_and_byte_tokens() -> None:
    assert token_bytes(_sentencepiece_style()) == [b"<unk>", b"\n", b"\xc3", b"\xa9", b" a", b"b", b" "]


def test_unknown_decoder_is_refused() -> None:
    backend = BackendTokenizer(models.WordLevel(vocab={"a": 0}, unk_token="a"))
    backend.decoder = decoders.WordPiece()
    with pytest.raises(UnsupportedModelError, match="WordPiece"):
        token_bytes(Tokenizer(backend))
