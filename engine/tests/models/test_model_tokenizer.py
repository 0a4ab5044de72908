"""The tokenizer built from GGUF metadata against transformers' tokenizer of the same file."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

from pyagent_core.errors import UnsupportedModelError
from pyagent_engine.models.checkpoint import Checkpoint
from pyagent_engine.models.gguf_file import open_gguf, read_metadata
from pyagent_engine.models.gguf_tokenizer import build_gguf_tokenizer
from pyagent_engine.models.tokenizer import Tokenizer

TEXTS = (
    "Hello, world!",
    "The quick brown fox jumps over the lazy dog.",
    "  leading spaces, trailing spaces   ",
    "tabs\tand\nnew\n\nlines\r\n",
    "naïve café déjà vu — «quotes» ‘single’ “double”",
    "日本語のテキストと中文文本，还有한국어 텍스트.",
    "Emoji: 😀🎉👍🏽 family 👨‍👩‍👧‍👦 flags 🇫🇷🇯🇵",
    "Math: ∑ x² ≤ ∞, π ≈ 3.14159, 1/2 + 3/4 = 5/4",
    "Prices: $12.50, €7, ¥1000 and 2024-11-21T10:30:00Z",
    "def f(x):\n    return {'a': [1, 2, 3], \"b\": x ** 2}  # comment",
    "don't won't I'm you're they've we'll he'd",
    "<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n",
    "<|endoftext|> special tokens inside <|im_end|>text",
    "URL https://example.com/path?q=1&r=two#frag and email a.b@c.org",
    "Zero\u200bwidth and combining e\u0301 and Ω Å",
    "",
)


@pytest.fixture(scope="module")
def tokenizer(checkpoint: Checkpoint) -> Tokenizer:
    """Our tokenizer of the embedded GGUF."""
    return checkpoint.tokenizer


@pytest.mark.parametrize("text", TEXTS)
def test_encode_and_decode_match_transformers(tokenizer: Tokenizer, hf_tokenizer: Any, text: str) -> None:
    """Same ids as transformers' tokenizer, and decoding them gives the text back as transformers does."""
    ids = tokenizer.encode(text)
    assert ids == hf_tokenizer.encode(text)
    assert tokenizer.decode(ids) == hf_tokenizer.decode(ids) == text
    assert tokenizer.decode(ids, skip_special_tokens=True) == hf_tokenizer.decode(ids, skip_special_tokens=True)


def test_decoding_random_ids_matches_transformers(tokenizer: Tokenizer, hf_tokenizer: Any) -> None:
    """Arbitrary id sequences (byte tokens that split characters, special tokens) decode identically."""
    rng = random.Random(0)
    for _ in range(200):
        ids = [rng.randrange(tokenizer.vocab_size) for _ in range(rng.randrange(1, 20))]
        for skip in (False, True):
            assert tokenizer.decode(ids, skip_special_tokens=skip) == hf_tokenizer.decode(ids, skip_special_tokens=skip)


def test_special_tokens_and_vocabulary(tokenizer: Tokenizer, checkpoint: Checkpoint) -> None:
    """Control tokens encode whole; the vocabulary is the GGUF's, and no BOS is added (the file says so)."""
    assert tokenizer.vocab_size == checkpoint.config.vocab_size == 49152
    assert tokenizer.encode("<|im_start|><|im_end|>") == [1, 2]
    assert tokenizer.id_to_token(2) == "<|im_end|>"
    assert tokenizer.id_to_token(10**6) is None


def test_digits_are_split_like_llama_cpp(tokenizer: Tokenizer) -> None:
    """``tokenizer.ggml.pre = smollm`` isolates every digit before GPT-2's split (llama.cpp's rule,
    and the ``Digits`` step of SmolLM2's own tokenizer.json), so a run of spaces before a number
    stays one token. transformers' GGUF loader ignores this key and gives ``Ġ Ġ 1 2`` here."""
    ids = tokenizer.encode("a  12")
    assert [tokenizer.id_to_token(i) for i in ids] == ["a", "ĠĠ", "1", "2"]
    assert tokenizer.decode(ids) == "a  12"


def test_unknown_pre_tokenizer_is_rejected(gguf_path: Path) -> None:
    """A pre-tokenizer name pyagent has no rule for is an error naming it and the known ones."""
    metadata = read_metadata(open_gguf(gguf_path)) | {"tokenizer.ggml.pre": "mystery"}
    with pytest.raises(UnsupportedModelError, match=r"'mystery'.*supported: .*smollm"):
        build_gguf_tokenizer(metadata, "test.gguf")


def test_sentencepiece_gguf_is_rejected(gguf_path: Path) -> None:
    """GGUF tokenizers other than byte-level BPE are refused with a pointer to tokenizer.json."""
    metadata = read_metadata(open_gguf(gguf_path)) | {"tokenizer.ggml.model": "llama"}
    with pytest.raises(UnsupportedModelError, match=r"tokenizer model 'llama'.*tokenizer.json"):
        build_gguf_tokenizer(metadata, "test.gguf")
