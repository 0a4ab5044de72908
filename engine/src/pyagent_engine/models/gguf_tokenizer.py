"""Build a ``tokenizers.Tokenizer`` from the vocabulary a GGUF file carries in its metadata.

llama.cpp stores two kinds (``tokenizer.ggml.model``):

- ``"gpt2"``, byte-level BPE (Qwen, Llama 3, SmolLM): tokens in the GPT-2 byte alphabet, merges
  (``"a b"`` strings, best first), a type per token (1 normal, 3 control, 4 user-defined, ...) and
  the name of the pre-tokenizer (``tokenizer.ggml.pre``) whose splitting the merges were learned
  with. The split rules per name are llama.cpp's (``llama-vocab.cpp``); they are rebuilt here with
  the ``tokenizers`` components a Hugging Face ``tokenizer.json`` of the same model uses.
- ``"llama"``, SentencePiece BPE (Llama 2, Mistral, Phi-3): tokens spelled with ``▁`` for a space,
  a score per token and no merges; llama.cpp merges the pair whose merged token scores highest, so
  the merges are every split of a token into two tokens, best-scoring first. Spaces become ``▁``,
  one is prepended unless ``tokenizer.ggml.add_space_prefix`` is false, and bytes missing from the
  vocabulary fall back to the ``<0xXX>`` tokens (type 6).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from tokenizers import AddedToken, Regex, decoders, models, normalizers, pre_tokenizers, processors
from tokenizers import Tokenizer as BackendTokenizer

from pyagent_core.errors import ModelFormatError, UnsupportedModelError

TOKEN_TYPE_CONTROL = 3
TOKEN_TYPE_USER_DEFINED = 4
#: SentencePiece's spelling of a space.
SPACE = "\u2581"

_LLAMA3_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_QWEN2_SPLIT = _LLAMA3_SPLIT.replace(r"\p{N}{1,3}", r"\p{N}")


def _gpt2() -> pre_tokenizers.PreTokenizer:
    """GPT-2's split regex, then bytes to the byte alphabet."""
    return pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)


def _digits_then_gpt2() -> pre_tokenizers.PreTokenizer:
    """Every digit on its own (``\\p{N}``), then GPT-2's split regex (StarCoder, SmolLM)."""
    return pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True), _gpt2()])


def _split_then_bytes(regex: str) -> pre_tokenizers.PreTokenizer:
    """Split on ``regex`` (matches isolated), then bytes to the byte alphabet."""
    return pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(regex), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])


def _llama3() -> pre_tokenizers.PreTokenizer:
    """Llama 3's split regex (numbers in groups of up to three), then bytes to the byte alphabet."""
    return _split_then_bytes(_LLAMA3_SPLIT)


def _qwen2() -> pre_tokenizers.PreTokenizer:
    """Qwen2's split regex (Llama 3's with every digit on its own), then bytes to the byte alphabet."""
    return _split_then_bytes(_QWEN2_SPLIT)


#: ``tokenizer.ggml.pre`` -> the pre-tokenizer llama.cpp applies for it.
PRE_TOKENIZERS: dict[str, Callable[[], pre_tokenizers.PreTokenizer]] = {
    **dict.fromkeys(("gpt-2", "mpt", "olmo", "jais"), _gpt2),
    **dict.fromkeys(("smollm", "starcoder", "refact", "codeshell", "command-r"), _digits_then_gpt2),
    **dict.fromkeys(("llama-bpe", "llama3", "llama-v3", "smaug-bpe", "dbrx", "falcon3"), _llama3),
    **dict.fromkeys(("qwen2", "deepseek-r1-qwen"), _qwen2),
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


def _spm_merges(tokens: Sequence[str], scores: Sequence[float]) -> list[tuple[str, str]]:
    """The merges llama.cpp's SentencePiece BPE applies: every split of a token into two tokens of the
    vocabulary, ranked by the merged token's score (best first; ties as transformers breaks them:
    longer left part, then longer right part, then vocabulary order)."""
    vocab = {t: i for i, t in enumerate(tokens)}
    ranked: list[tuple[float, int, int, int, int, int, str, str]] = []
    for index, (token, score) in enumerate(zip(tokens, scores, strict=True)):
        pairs = [(token[:cut], token[cut:]) for cut in range(1, len(token))
                 if token[:cut] in vocab and token[cut:] in vocab]
        ranked.extend((-score, -len(left), -len(right), index, vocab[left], vocab[right], left, right)
                      for left, right in pairs)
    return [(left, right) for *_, left, right in sorted(ranked)]


def _byte_level(metadata: Mapping[str, Any], tokens: Sequence[str], where: str) -> BackendTokenizer:
    """The byte-level BPE (``gpt2``) tokenizer of ``metadata``."""
    pre = metadata.get("tokenizer.ggml.pre", "gpt-2")
    if pre not in PRE_TOKENIZERS:
        raise UnsupportedModelError(
            f"{where} uses pre-tokenizer {pre!r} (tokenizer.ggml.pre); supported: {', '.join(sorted(PRE_TOKENIZERS))}"
        )
    merges = metadata.get("tokenizer.ggml.merges")
    if merges is None:
        raise ModelFormatError(f"{where} lacks the tokenizer metadata key 'tokenizer.ggml.merges'")
    vocab = {t: i for i, t in enumerate(tokens)}
    backend = BackendTokenizer(models.BPE(vocab=vocab, merges=_merge_pairs(merges, vocab, where)))
    backend.pre_tokenizer = PRE_TOKENIZERS[pre]()
    backend.decoder = decoders.ByteLevel()
    return backend


def _sentencepiece(metadata: Mapping[str, Any], tokens: Sequence[str], where: str) -> BackendTokenizer:
    """The SentencePiece BPE (``llama``) tokenizer of ``metadata``."""
    scores = metadata.get("tokenizer.ggml.scores")
    if scores is None or len(scores) != len(tokens):
        raise ModelFormatError(f"{where} has {len(tokens)} tokens but "
                               f"{'no' if scores is None else len(scores)} scores (tokenizer.ggml.scores); a "
                               "SentencePiece vocabulary needs one score per token")
    unknown = metadata.get("tokenizer.ggml.unknown_token_id")
    vocab = {t: i for i, t in enumerate(tokens)}
    backend = BackendTokenizer(models.BPE(vocab=vocab, merges=_spm_merges(tokens, scores), byte_fallback=True,
                                          unk_token=None if unknown is None else tokens[unknown], fuse_unk=True))
    prefix = metadata.get("tokenizer.ggml.add_space_prefix", True)
    replace = normalizers.Replace(" ", SPACE)
    backend.normalizer = normalizers.Sequence([normalizers.Prepend(SPACE), replace]) if prefix else replace
    steps = [decoders.Replace(SPACE, " "), decoders.ByteFallback(), decoders.Fuse()]
    backend.decoder = decoders.Sequence([*steps, decoders.Strip(" ", 1, 0)] if prefix else steps)
    return backend


#: ``tokenizer.ggml.model`` -> the builder of that kind of tokenizer.
TOKENIZER_MODELS = {"gpt2": _byte_level, "llama": _sentencepiece}


def build_gguf_tokenizer(metadata: Mapping[str, Any], where: str) -> BackendTokenizer:
    """The tokenizer described by the ``tokenizer.ggml.*`` keys of ``metadata``: byte-level BPE
    (``gpt2``) or SentencePiece BPE (``llama``).

    Control tokens (``<|im_start|>``, ...) become special added tokens and user-defined ones plain
    added tokens, so both are matched whole in text. A ``BOS`` is prepended when
    ``tokenizer.ggml.add_bos_token`` says so (a SentencePiece vocabulary without the key: yes, as in
    llama.cpp). Raises :class:`UnsupportedModelError` for another tokenizer model or an unknown
    pre-tokenizer, :class:`ModelFormatError` for missing keys.
    """
    kind = metadata.get("tokenizer.ggml.model")
    if kind not in TOKENIZER_MODELS:
        raise UnsupportedModelError(
            f"{where} has tokenizer model {kind!r} (tokenizer.ggml.model); pyagent builds these from GGUF "
            f"metadata: {', '.join(TOKENIZER_MODELS)} (for another, use a checkpoint folder with tokenizer.json)"
        )
    tokens: Sequence[str] | None = metadata.get("tokenizer.ggml.tokens")
    if tokens is None:
        raise ModelFormatError(f"{where} lacks the tokenizer metadata key 'tokenizer.ggml.tokens'")
    types: Sequence[int] = metadata.get("tokenizer.ggml.token_type") or [1] * len(tokens)
    if len(types) != len(tokens):
        raise ModelFormatError(f"{where} has {len(tokens)} tokens but {len(types)} token types")
    backend = TOKENIZER_MODELS[kind](metadata, tokens, where)
    typed = list(zip(tokens, types, strict=True))
    control = [AddedToken(t, normalized=False, special=True) for t, k in typed if k == TOKEN_TYPE_CONTROL]
    user_defined = [AddedToken(t, normalized=False, special=False) for t, k in typed if k == TOKEN_TYPE_USER_DEFINED]
    backend.add_special_tokens(control)
    backend.add_tokens(user_defined)
    bos = metadata.get("tokenizer.ggml.bos_token_id")
    if metadata.get("tokenizer.ggml.add_bos_token", kind == "llama") and bos is not None:
        backend.post_processor = processors.TemplateProcessing(
            single=f"{tokens[bos]} $A", pair=f"{tokens[bos]} $A $B", special_tokens=[(tokens[bos], bos)]
        )
    return backend
