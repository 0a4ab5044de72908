"""A model's tokenizer as a :class:`~pyagent_core.interfaces.grammar.TokenizerInfo`: the bytes behind
every token, for samplers whose parameters hold text (DRY's string breakers) and grammar backends.

Samplers and grammar backends match bytes, so each token id must map to the exact bytes it stands
for. Byte-level BPE vocabularies (GPT-2, Llama 3, SmolLM) spell bytes with the GPT-2 byte alphabet
(``Ġ`` is a space); SentencePiece-style vocabularies write ``▁`` for a space and ``<0x0A>`` for a raw
byte. Added tokens (``<|im_end|>``...) are matched whole in text, so they stand for their literal text.

Works on a Hugging Face ``tokenizers.Tokenizer`` (built from GGUF metadata or read from
``tokenizer.json``), so any host that has one (the reference engine, the vLLM adapter) describes it
the same way.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Iterable
from pathlib import Path

from tokenizers import Tokenizer

from pyagent_core.errors import UnsupportedModelError
from pyagent_core.interfaces.grammar import TokenizerInfo

_BYTE_TOKEN = re.compile(r"^<0x([0-9A-Fa-f]{2})>$")


@functools.cache
def byte_alphabet() -> dict[str, int]:
    """GPT-2's byte alphabet inverted: the printable character standing for each byte -> the byte.

    Bytes that print as themselves in Latin-1 (``!``..``~``, ``¡``..``¬``, ``®``..``ÿ``) keep their code
    point; the other 68 bytes take the code points from 256 upwards, in byte order.
    """
    printable = [*range(0x21, 0x7F), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    shifted = [b for b in range(256) if b not in printable]
    table = {chr(b): b for b in printable}
    table.update({chr(256 + n): b for n, b in enumerate(shifted)})
    return table


def _decoder_types(tokenizer: Tokenizer) -> set[str]:
    decoder = json.loads(tokenizer.to_str()).get("decoder") or {}
    parts = decoder.get("decoders", [decoder]) if decoder.get("type") == "Sequence" else [decoder]
    return {str(part.get("type")) for part in parts}


def _byte_level(token: str) -> bytes:
    alphabet = byte_alphabet()
    return bytes(alphabet[c] for c in token)


def _sentencepiece(token: str) -> bytes:
    raw = _BYTE_TOKEN.match(token)
    return bytes([int(raw.group(1), 16)]) if raw else token.replace("▁", " ").encode("utf-8")


def token_bytes(tokenizer: Tokenizer) -> list[bytes]:
    """The bytes each token id stands for, ids ``0 .. size - 1`` (added tokens included).

    Raises :class:`UnsupportedModelError` for a tokenizer whose decoder is neither byte-level nor
    SentencePiece-style (``▁`` spaces with byte fallback).
    """
    kinds = _decoder_types(tokenizer)
    if "ByteLevel" in kinds:
        spell = _byte_level
    elif "ByteFallback" in kinds or "Metaspace" in kinds:
        spell = _sentencepiece
    else:
        raise UnsupportedModelError(
            f"cannot tell the bytes of this tokenizer's tokens: its decoder is {sorted(kinds)}; grammar "
            "backends support byte-level BPE (ByteLevel) and SentencePiece-style (Metaspace, ByteFallback) vocabularies"
        )
    added = {i: t.content for i, t in tokenizer.get_added_tokens_decoder().items()}
    out = []
    for token_id in range(int(tokenizer.get_vocab_size(with_added_tokens=True))):
        text = added.get(token_id)
        if text is not None:
            out.append(text.encode("utf-8"))
            continue
        token = tokenizer.id_to_token(token_id)
        if token is None:
            out.append(b"")
        else:
            try:
                out.append(spell(token))
            except KeyError:
                raise UnsupportedModelError(
                    f"token {token_id} ({token!r}) has a character outside the byte-level alphabet"
                ) from None
    return out


def _encode(tokenizer: Tokenizer, text: str) -> list[int]:
    return list(tokenizer.encode(text, add_special_tokens=False).ids)


def tokenizer_info(tokenizer: Tokenizer, eos_token_ids: Iterable[int], vocab_size: int | None = None) -> TokenizerInfo:
    """The :class:`TokenizerInfo` of ``tokenizer``.

    Args:
        tokenizer: the model's ``tokenizers.Tokenizer``.
        eos_token_ids: the tokens that end generation (the model config's).
        vocab_size: the model's logits width when it pads its vocabulary (default: the tokenizer's size).

    Special added tokens other than the end-of-sequence ones are listed as ``special_token_ids``,
    so no grammar ever allows them. ``encode`` is the tokenizer's, without special tokens.
    """
    eos = tuple(dict.fromkeys(int(e) for e in eos_token_ids))
    special = [i for i, t in tokenizer.get_added_tokens_decoder().items() if t.special and i not in eos]
    vocab = token_bytes(tokenizer)
    return TokenizerInfo(vocab=vocab, eos_token_ids=eos, special_token_ids=sorted(special),
                         vocab_size=max(vocab_size or 0, len(vocab)),
                         encode=functools.partial(_encode, tokenizer))


def tokenizer_info_from_file(path: Path, eos_token_ids: Iterable[int], vocab_size: int | None = None) -> TokenizerInfo:
    """:func:`tokenizer_info` of the ``tokenizer.json`` at ``path``."""
    return tokenizer_info(Tokenizer.from_file(str(path)), eos_token_ids, vocab_size)
