"""The tokenizer built from GGUF metadata against transformers' tokenizer of the same file."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from pyagent_core.errors import UnsupportedModelError
from pyagent_engine.models.checkpoint import Checkpoint
from pyagent_engine.models.gguf_file import open_gguf, read_metadata
from pyagent_engine.models.gguf_tokenizer import PRE_TOKENIZERS, build_gguf_tokenizer
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


def test_unknown_tokenizer_model_is_rejected(gguf_path: Path) -> None:
    """A GGUF tokenizer model pyagent cannot build is refused, naming the supported ones."""
    metadata = read_metadata(open_gguf(gguf_path)) | {"tokenizer.ggml.model": "t5"}
    with pytest.raises(UnsupportedModelError, match=r"tokenizer model 't5' .*: gpt2, llama .*tokenizer.json"):
        build_gguf_tokenizer(metadata, "test.gguf")


def test_qwen2_pre_tokenizer_isolates_every_digit() -> None:
    """``tokenizer.ggml.pre = qwen2`` splits numbers digit by digit (Llama 3's rule groups up to three)."""
    def pieces(pre: str) -> list[str]:
        return [piece for piece, _ in PRE_TOKENIZERS[pre]().pre_tokenize_str("year 2024")]

    assert pieces("qwen2") == ["year", "Ġ", "2", "0", "2", "4"]
    assert pieces("llama3") == ["year", "Ġ", "202", "4"]


def _sentencepiece_gguf(path: Path) -> Path:
    """A phi3 GGUF whose vocabulary is SentencePiece BPE (``tokenizer.ggml.model = llama``): <unk>, <s>,
    </s>, the 256 byte tokens, then a BPE vocabulary trained on TEXTS, scored by rank."""
    from gguf import GGUFWriter, TokenType
    from tokenizers import Tokenizer as Backend
    from tokenizers import models, pre_tokenizers, trainers

    specials = ["<unk>", "<s>", "</s>", *(f"<0x{b:02X}>" for b in range(256))]
    trained = Backend(models.BPE(unk_token="<unk>", byte_fallback=True))
    trained.pre_tokenizer = pre_tokenizers.Metaspace()
    trained.train_from_iterator([t for t in TEXTS if "<|" not in t] * 3,
                                trainers.BpeTrainer(vocab_size=700, special_tokens=specials, show_progress=False))
    tokens = [token for token, _ in sorted(trained.get_vocab().items(), key=lambda item: item[1])]
    types = [TokenType.UNKNOWN, TokenType.CONTROL, TokenType.CONTROL, *[TokenType.BYTE] * 256]
    types += [TokenType.NORMAL] * (len(tokens) - len(types))
    writer = GGUFWriter(path, arch="phi3")
    for add, value in ((writer.add_block_count, 1), (writer.add_context_length, 32), (writer.add_head_count, 2),
                       (writer.add_embedding_length, 8), (writer.add_feed_forward_length, 16)):
        add(value)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_tokenizer_model("llama")
    writer.add_token_list(tokens)
    writer.add_token_scores([0.0 if k != TokenType.NORMAL else -float(i) for i, k in enumerate(types)])
    writer.add_token_types(types)
    writer.add_unk_token_id(0)
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.add_tensor("token_embd.weight", np.zeros((len(tokens), 8), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def test_sentencepiece_gguf_matches_transformers(tmp_path: Path) -> None:
    """A SentencePiece GGUF vocabulary encodes (BOS first, byte fallback for characters it lacks)
    and decodes as transformers' tokenizer of the same file."""
    transformers = pytest.importorskip("transformers")
    path = _sentencepiece_gguf(tmp_path / "spm.gguf")
    ours = Tokenizer(build_gguf_tokenizer(read_metadata(open_gguf(path)), str(path)))
    theirs = transformers.AutoTokenizer.from_pretrained(tmp_path, gguf_file=path.name)
    for text in TEXTS:
        ids = ours.encode(text)
        assert ids == theirs.encode(text), text
        assert ours.decode(ids, skip_special_tokens=True) == theirs.decode(ids, skip_special_tokens=True), text
    # U+1D11E is in no text the vocabulary was trained on, so it can only be spelled in byte tokens
    assert ours.encode("hi")[0] == 1 and "<0xF0>" in [ours.id_to_token(i) for i in ours.encode("\U0001d11e")]
