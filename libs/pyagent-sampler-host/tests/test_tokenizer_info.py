"""A tokenizers.Tokenizer as a TokenizerInfo: byte-level and SentencePiece-style vocabularies, checked
against the bytes of the text they encode (UTF-8) and tokenizers' own byte alphabet."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from tokenizers import Tokenizer, decoders, models, pre_tokenizers

from pyagent_core.errors import UnsupportedModelError
from pyagent_sampler_host.tokenizer_info import byte_alphabet, token_bytes, tokenizer_info


def test_byte_alphabet_is_the_tokenizers_byte_level_alphabet() -> None:
    alphabet = byte_alphabet()
    assert sorted(alphabet) == sorted(pre_tokenizers.ByteLevel.alphabet())
    assert sorted(alphabet.values()) == list(range(256))


def byte_level() -> Tokenizer:
    """A byte-level BPE without merges: one token per byte, spelled in GPT-2's byte alphabet, plus an added token."""
    vocab = {char: i for i, char in enumerate(sorted(pre_tokenizers.ByteLevel.alphabet()))}
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.add_special_tokens(["<|end|>"])
    return tokenizer


@given(st.text(max_size=40))
def test_byte_level_token_bytes_join_to_the_texts_utf8(text: str) -> None:
    tokenizer = byte_level()
    vocab = token_bytes(tokenizer)
    ids = tokenizer.encode(text, add_special_tokens=False).ids
    assert b"".join(vocab[i] for i in ids) == text.encode("utf-8")


def test_info_marks_special_tokens_and_encodes_without_them() -> None:
    tokenizer = byte_level()
    end = tokenizer.token_to_id("<|end|>")
    info = tokenizer_info(tokenizer, eos_token_ids=[end], vocab_size=300)
    assert info.vocab[end] == b"<|end|>" and info.eos_token_ids == (end,) and end not in info.special_token_ids
    assert info.vocab_size == 300 and len(info.vocab) == 257
    assert info.encode is not None and info.encode("ab") == tokenizer.encode("ab", add_special_tokens=False).ids


def test_sentencepiece_pieces_and_byte_tokens() -> None:
    vocab = {"<unk>": 0, "<0x0A>": 1, "<0xC3>": 2, "<0xA9>": 3, "▁a": 4, "b": 5, "▁": 6}
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token="<unk>", byte_fallback=True))
    tokenizer.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse()])
    assert token_bytes(tokenizer) == [b"<unk>", b"\n", b"\xc3", b"\xa9", b" a", b"b", b" "]


def test_unknown_decoder_is_refused() -> None:
    tokenizer = Tokenizer(models.WordLevel(vocab={"a": 0}, unk_token="a"))
    tokenizer.decoder = decoders.WordPiece()
    with pytest.raises(UnsupportedModelError, match="WordPiece"):
        token_bytes(tokenizer)
