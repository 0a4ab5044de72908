"""Build a ``tokenizers.Tokenizer`` from the vocabulary a GGUF file carries in its metadata.

llama.cpp stores a byte-level BPE tokenizer (``tokenizer.ggml.model = "gpt2"``) as its tokens (in
the GPT-2 byte alphabet), merges (``"a b"`` strings, best first), a type per token (1 normal,
3 control, 4 user-defined, ...) and the name of the pre-tokenizer (``tokenizer.ggml.pre``) whose
splitting the merges were learned with. The split rules per name are llama.cpp's
(``llama-vocab.cpp``); they are rebuilt here with the ``tokenizers`` components a Hugging Face
``tokenizer.json`` of the same model uses.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from tokenizers import AddedToken, Regex, decoders, models, pre_tokenizers, processors
from tokenizers import Tokenizer as BackendTokenizer

from pyagent_core.errors import ModelFormatError, UnsupportedModelError

TOKEN_TYPE_CONTROL = 3
TOKEN_TYPE_USER_DEFINED = 4

_LLAMA3_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)


def _gpt2() -> pre_tokenizers.PreTokenizer:
    """GPT-2's split regex, then bytes to the byte alphabet."""
    return pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)


def _digits_then_gpt2() -> pre_tokenizers.PreTokenizer:
    """Every digit on its own (``\\p{N}``), then GPT-2's split regex (StarCoder, SmolLM)."""
    return pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True), _gpt2()])


def _llama3() -> pre_tokenizers.PreTokenizer:
    """Llama 3's split regex (numbers in groups of up to three), then bytes to the byte alphabet."""
    return pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(_LLAMA3_SPLIT), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])


#: ``tokenizer.ggml.pre`` -> the pre-tokenizer llama.cpp applies for it.
PRE_TOKENIZERS: dict[str, Callable[[], pre_tokenizers.PreTokenizer]] = {
    **dict.fromkeys(("gpt-2", "mpt", "olmo", "jais"), _gpt2),
    **dict.fromkeys(("smollm", "starcoder", "refact", "codeshell", "command-r"), _digits_then_gpt2),
    **dict.fromkeys(("llama-bpe", "llama3", "llama-v3", "smaug-bpe", "dbrx", "falcon3"), _llama3),
}


def _merge_pairs(merges: Sequence[Any], vocab: Mapping[str, int], where: str) -> list[tuple[str, str]]:
    """``"a b"`` merges as pairs; :class:`ModelFormatError` for a malformed one or one naming a token
    (``a``, ``b`` or ``ab``) that is not in the vocabulary (which the tokenizers library panics on)."""
    pairs = []
    for index, merge in enumerate(merges):
        first, space, second = merge.partition(" ") if isinstance(merge, str) else ("", "", "")
        if not (space and first and second):
            raise ModelFormatError(f"{where}: tokenizer.ggml.merges[{index}] is {merge!r}; each merge must be "
                                   "two tokens separated by one space")
        missing = next((t for t in (first, second, first + second) if t not in vocab), None)
        if missing is not None:
            raise ModelFormatError(f"{where}: tokenizer.ggml.merges[{index}] ({merge!r}) names {missing!r}, which is "
                                   "not in the vocabulary (tokenizer.ggml.tokens); the file is damaged or was "
                                   "converted wrongly")
        pairs.append((first, second))
    return pairs


def build_gguf_tokenizer(metadata: Mapping[str, Any], where: str) -> BackendTokenizer:
    """The byte-level BPE tokenizer described by the ``tokenizer.ggml.*`` keys of ``metadata``.

    Control tokens (``<|im_start|>``, ...) become special added tokens and user-defined ones plain
    added tokens, so both are matched whole in text. A ``BOS`` is prepended when
    ``tokenizer.ggml.add_bos_token`` says so. Raises :class:`UnsupportedModelError` for another
    tokenizer model or an unknown pre-tokenizer, :class:`ModelFormatError` for missing keys.
    """
    kind = metadata.get("tokenizer.ggml.model")
    if kind != "gpt2":
        raise UnsupportedModelError(
            f"{where} has tokenizer model {kind!r}; pyagent builds byte-level BPE ('gpt2') tokenizers from "
            "GGUF metadata (for other tokenizers use a checkpoint folder with tokenizer.json)"
        )
    pre = metadata.get("tokenizer.ggml.pre", "gpt-2")
    if pre not in PRE_TOKENIZERS:
        raise UnsupportedModelError(
            f"{where} uses pre-tokenizer {pre!r} (tokenizer.ggml.pre); supported: {', '.join(sorted(PRE_TOKENIZERS))}"
        )
    try:
        tokens: Sequence[str] = metadata["tokenizer.ggml.tokens"]
        merges: Sequence[str] = metadata["tokenizer.ggml.merges"]
    except KeyError as missing:
        raise ModelFormatError(f"{where} lacks the tokenizer metadata key {missing}") from None
    types: Sequence[int] = metadata.get("tokenizer.ggml.token_type") or [1] * len(tokens)
    if len(types) != len(tokens):
        raise ModelFormatError(f"{where} has {len(tokens)} tokens but {len(types)} token types")
    vocab = {t: i for i, t in enumerate(tokens)}
    backend = BackendTokenizer(models.BPE(vocab=vocab, merges=_merge_pairs(merges, vocab, where)))
    backend.pre_tokenizer = PRE_TOKENIZERS[pre]()
    backend.decoder = decoders.ByteLevel()
    typed = list(zip(tokens, types, strict=True))
    control = [AddedToken(t, normalized=False, special=True) for t, k in typed if k == TOKEN_TYPE_CONTROL]
    user_defined = [AddedToken(t, normalized=False, special=False) for t, k in typed if k == TOKEN_TYPE_USER_DEFINED]
    backend.add_special_tokens(control)
    backend.add_tokens(user_defined)
    bos = metadata.get("tokenizer.ggml.bos_token_id")
    if metadata.get("tokenizer.ggml.add_bos_token") and bos is not None:
        backend.post_processor = processors.TemplateProcessing(
            single=f"{tokens[bos]} $A", pair=f"{tokens[bos]} $A $B", special_tokens=[(tokens[bos], bos)]
        )
    return backend
