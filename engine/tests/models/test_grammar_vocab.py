"""The embedded model's tokenizer as grammar backends and samplers see it (the description itself is
tested in libs/pyagent-sampler-host: byte-level and SentencePiece-style vocabularies)."""

from __future__ import annotations

import pytest

from pyagent_engine.models.grammar_vocab import grammar_tokenizer_info
from pyagent_engine.models.tokenizer import Tokenizer

TEXTS = ("Hello, world!", '{"name": "Zoë", "tags": ["a\\n", 3]}', "naïve café — 東京 🚀", "\ttabs\r\nand\x00nul")


@pytest.fixture(scope="module")
def embedded() -> Tokenizer:
    from pyagent_engine.testing.grammar_corpus import embedded_tokenizer

    return embedded_tokenizer()[0]


@pytest.mark.parametrize("text", TEXTS)
def test_token_bytes_join_to_the_text(embedded: Tokenizer, text: str) -> None:
    vocab = grammar_tokenizer_info(embedded, eos_token_ids=[2]).vocab
    ids = embedded.encode(text, add_special_tokens=False)
    assert b"".join(vocab[i] for i in ids) == text.encode("utf-8")


def test_embedded_info_marks_special_tokens(embedded: Tokenizer) -> None:
    info = grammar_tokenizer_info(embedded, eos_token_ids=[2], vocab_size=49160)
    assert info.vocab[2] == b"<|im_end|>" and info.eos_token_ids == (2,)
    assert 2 not in info.special_token_ids and {0, 1} <= set(info.special_token_ids)
    assert info.vocab_size == 49160 and len(info.vocab) == embedded.vocab_size
    assert info.encode is not None and info.encode("ab c") == embedded.encode("ab c", add_special_tokens=False)
