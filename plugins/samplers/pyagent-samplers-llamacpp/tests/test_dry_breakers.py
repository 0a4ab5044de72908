"""DRY's sequence breakers as strings: the heads and tails built from a vocabulary against a
line-by-line transcription of llama.cpp's ``get_overlapping_token_sequences``, the sampler with
string breakers against the same sampler given those heads and tails as token ids, and llama.cpp's
default set."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from pyagent_core.interfaces.grammar import TokenizerInfo
from pyagent_core.interfaces.sampler import AddedRequest, BatchUpdate, SamplerContext
from pyagent_samplers_llamacpp.breakers import DEFAULT_SEQUENCE_BREAKERS, string_breakers
from pyagent_samplers_llamacpp.dry import DryProcessor


def llama_cpp_overlaps(text: str, vocab: list[bytes], encode) -> dict[int, set[tuple[int, ...]]]:
    """llama.cpp's loop as it is written: every position of the string's first byte in each token,
    then byte by byte while both last (the string is cut to 40 bytes, tails to 20 tokens)."""
    s = text.encode("utf-8")[:40]
    table: dict[int, set[tuple[int, ...]]] = {}
    for token_id, word in enumerate(vocab):
        if word.find(s) != -1:
            table.setdefault(token_id, set()).add(())
            continue
        pos = word.find(s[:1])
        while pos != -1:
            i, match = 1, True
            while i < len(s) and i + pos < len(word):
                if word[pos + i] != s[i]:
                    match = False
                    break
                i += 1
            if match:
                try:
                    rest = s[i:].decode("utf-8")
                except UnicodeDecodeError:  # a text tokenizer cannot take stray continuation bytes
                    rest = None
                if rest is not None:
                    table.setdefault(token_id, set()).add(tuple(encode(rest)[:20]))
            pos = word.find(s[:1], pos + 1)
    return table


def greedy_encoder(vocab: list[bytes]):
    """Longest match first over ``vocab`` (which holds every single byte used)."""
    def encode(text: str) -> list[int]:
        data, ids = text.encode("utf-8"), []
        while data:
            token = max((t for t, w in enumerate(vocab) if w and data.startswith(w)), key=lambda t: len(vocab[t]))
            ids.append(token)
            data = data[len(vocab[token]):]
        return ids
    return encode


ALPHABET = [b"a", b"b", b":", b"#", b"\n"]
words = st.lists(st.sampled_from(ALPHABET), min_size=1, max_size=4).map(b"".join)


@settings(max_examples=150, deadline=None)
@given(st.lists(words, max_size=25, unique=True), st.text("ab:#\n", min_size=1, max_size=6))
def test_heads_and_tails_match_llama_cpps_scan(extra: list[bytes], text: str) -> None:
    vocab = ALPHABET + [w for w in extra if w not in ALPHABET]
    encode = greedy_encoder(vocab)
    assert string_breakers(text, vocab, encode) == llama_cpp_overlaps(text, vocab, encode)


def test_a_breaker_split_inside_a_character_has_no_tail() -> None:
    """"é" is two bytes; a token ending with its first byte would need a tail of one stray byte."""
    vocab = [b"x", "é".encode(), b"x\xc3", b"\xa9"]
    table = string_breakers("é", vocab, greedy_encoder(vocab))
    assert table == {1: {()}}


def test_the_embedded_tokenizers_newline_breaker_is_every_token_holding_a_newline() -> None:
    grammar_corpus = pytest.importorskip("pyagent_engine.testing.grammar_corpus")
    _, info = grammar_corpus.embedded_tokenizer()
    table = string_breakers("\n", info.vocab, info.encode)
    holding = {t for t, word in enumerate(info.vocab) if b"\n" in word}
    assert len(holding) > 10 and table == {t: {()} for t in holding}
    assert string_breakers("###", info.vocab, info.encode) == llama_cpp_overlaps("###", list(info.vocab), info.encode)


VOCAB = [b"a", b"b", b"c", b":", b"\n", b"x\n", b"#", b"##", b"y#", b"z"]


def context_with_tokenizer() -> SamplerContext:
    info = TokenizerInfo(vocab=VOCAB, eos_token_ids=[9], encode=greedy_encoder(VOCAB))
    return SamplerContext(len(VOCAB), tokenizer_info=lambda: info)


def dry_logits(context: SamplerContext, tokens: list[int], **params) -> torch.Tensor:
    processor = DryProcessor({}, context)
    params = {"dry_multiplier": 1.0, "dry_allowed_length": 2, **params}
    processor.update_state(BatchUpdate(1, added=(AddedRequest(0, params, tokens),)))
    return processor.apply(torch.zeros(1, len(VOCAB)))[0]


@settings(max_examples=120, deadline=None)
@given(st.lists(st.integers(0, len(VOCAB) - 2), max_size=24),
       st.lists(st.sampled_from(["\n", ":", "##", "###", "#:", "ab"]), min_size=1, max_size=3))
def test_string_breakers_act_as_their_heads_and_tails(tokens: list[int], texts: list[str]) -> None:
    """Breaking on strings is breaking on the token sequences llama.cpp's scan makes of them."""
    encode = greedy_encoder(VOCAB)
    sequences = sorted({(head, *tail) for text in texts
                        for head, tails in llama_cpp_overlaps(text, VOCAB, encode).items() for tail in tails})
    by_text = dry_logits(context_with_tokenizer(), tokens, dry_sequence_breakers=texts)
    by_ids = dry_logits(SamplerContext(len(VOCAB)), tokens, dry_sequence_breakers=[list(s) for s in sequences])
    assert torch.equal(by_text, by_ids)


def test_a_repeat_stops_at_a_token_holding_a_breaker_and_at_one_spanning_tokens() -> None:
    # "a x\n b c a x\n b": "c" would extend the repeat "a x\n b", but "x\n" holds a newline, so the
    # repeat reaches back one token only, shorter than the allowed length
    tokens = [0, 5, 1, 2, 0, 5, 1]
    unbroken = dry_logits(context_with_tokenizer(), tokens, dry_sequence_breakers=[])
    assert float(unbroken[2]) < 0  # "c" would extend "a b" -> "a b c"
    assert torch.equal(dry_logits(context_with_tokenizer(), tokens, dry_sequence_breakers=["\n"]), torch.zeros(10))
    # "##" written as "y#" then "#": the breaker spans two tokens
    tokens = [0, 8, 6, 1, 2, 0, 8, 6, 1]
    assert float(dry_logits(context_with_tokenizer(), tokens, dry_sequence_breakers=[])[2]) < 0
    assert torch.equal(dry_logits(context_with_tokenizer(), tokens, dry_sequence_breakers=["##"]), torch.zeros(10))


def test_unset_breakers_are_llama_cpps_default_set_where_there_is_a_tokenizer() -> None:
    assert DEFAULT_SEQUENCE_BREAKERS == ("\n", ":", '"', "*")
    tokens = [0, 3, 1, 2, 0, 3, 1]  # ":" inside the repeat
    with_tokenizer = context_with_tokenizer()
    assert torch.equal(dry_logits(with_tokenizer, tokens),
                       dry_logits(with_tokenizer, tokens, dry_sequence_breakers=list(DEFAULT_SEQUENCE_BREAKERS)))
    assert torch.equal(dry_logits(with_tokenizer, tokens), torch.zeros(10))
    # without a tokenizer there is no default set: the repeat is penalised, as with no breakers
    bare = SamplerContext(len(VOCAB))
    assert torch.equal(dry_logits(bare, tokens), dry_logits(bare, tokens, dry_sequence_breakers=[]))
    assert float(dry_logits(bare, tokens)[2]) < 0


def test_token_id_breakers_still_work_and_strings_without_a_tokenizer_are_refused() -> None:
    tokens = [0, 3, 1, 2, 0, 3, 1]
    assert torch.equal(dry_logits(SamplerContext(len(VOCAB)), tokens, dry_sequence_breakers=[[3]]), torch.zeros(10))
    with pytest.raises(ValueError, match=r"dry_sequence_breakers holds strings \[':'\], which need the model's "
                                         r"tokenizer.*pass token id sequences"):
        dry_logits(SamplerContext(len(VOCAB)), tokens, dry_sequence_breakers=[":"])
    with pytest.raises(ValueError, match="must be a list of non-empty strings or non-empty lists of token ids"):
        dry_logits(context_with_tokenizer(), tokens, dry_sequence_breakers=[""])


def test_a_tokenizer_that_cannot_be_described_fails_explicit_strings_only() -> None:
    def broken() -> TokenizerInfo:
        raise RuntimeError("decoder 'WordPiece' has no bytes")

    context = SamplerContext(len(VOCAB), tokenizer_info=broken)
    with pytest.raises(ValueError, match=r"tokenizer is unavailable to samplers \(RuntimeError: decoder 'WordPiece'"):
        dry_logits(context, [0, 1, 0], dry_sequence_breakers=["\n"])
    with pytest.warns(RuntimeWarning, match="default sequence breakers need the model's tokenizer"):
        out = dry_logits(context, [0, 3, 1, 2, 0, 3, 1])
    assert float(out[2]) < 0
