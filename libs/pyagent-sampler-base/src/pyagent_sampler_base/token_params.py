"""Per-request parameters made of token ids: id lists, id sequences and per-token biases.

They follow the protocol of :class:`~pyagent_sampler_base.request_params.RequestParam`
(``name`` and ``validate(value, where)``); :func:`check_in_vocab` adds the vocabulary bound, which
only the processor knows.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import attrs


def _is_token_id(value: Any) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool) and int(value) >= 0


def _is_list(value: Any) -> bool:
    return isinstance(value, Sequence) and not isinstance(value, str | bytes)


def _reject(name: str, value: Any, where: str, allowed: str) -> None:
    raise ValueError(f"{where}: {name}={value!r} is invalid; {name} must be {allowed}")


@attrs.frozen
class TokenIdsParam:
    """A list of token ids (``allowed_token_ids``, ``suppress_tokens``...)."""

    name: str
    allowed: str = "a list of token ids (integers >= 0)"

    def validate(self, value: Any, where: str) -> None:
        """Raise ``ValueError`` unless ``value`` is ``None`` or a list of non-negative integers."""
        if value is not None and not (_is_list(value) and all(_is_token_id(t) for t in value)):
            _reject(self.name, value, where, self.allowed)


@attrs.frozen
class TokenSequencesParam:
    """A list of non-empty token id sequences (``bad_words_ids``, ``dry_sequence_breakers``).

    With ``text=True`` an item may also be a non-empty string, which the sampler turns into token
    ids itself (with the tokenizer its ``SamplerContext`` offers): DRY's sequence breakers are
    strings in llama.cpp.
    """

    name: str
    text: bool = False

    @property
    def allowed(self) -> str:
        """What an allowed value is, in words."""
        if self.text:
            return "a list of non-empty strings or non-empty lists of token ids (integers >= 0)"
        return "a list of non-empty lists of token ids (integers >= 0)"

    def _item_ok(self, item: Any) -> bool:
        if isinstance(item, str):
            return self.text and bool(item)
        return _is_list(item) and bool(item) and all(_is_token_id(t) for t in item)

    def validate(self, value: Any, where: str) -> None:
        """Raise ``ValueError`` unless ``value`` is ``None`` or a list of valid items."""
        if value is None:
            return
        if not _is_list(value) or not all(self._item_ok(item) for item in value):
            _reject(self.name, value, where, self.allowed)


def split_sequences(value: Iterable[str | Sequence[int]]) -> tuple[list[str], list[tuple[int, ...]]]:
    """The strings and the token id sequences of a validated :class:`TokenSequencesParam` value."""
    texts: list[str] = []
    sequences: list[tuple[int, ...]] = []
    for item in value:
        if isinstance(item, str):
            texts.append(item)
        else:
            sequences.append(tuple(int(t) for t in item))
    return texts, sequences


@attrs.frozen
class TokenBiasParam:
    """A mapping of token id to a finite additive bias in ``[-limit, limit]`` (``logit_bias``)."""

    name: str
    limit: float = 100.0

    def validate(self, value: Any, where: str) -> None:
        """Raise ``ValueError`` unless ``value`` is ``None`` or maps token ids to biases in range.

        Keys may be integers or strings of digits (JSON objects have string keys).
        """
        if value is None:
            return
        ok = isinstance(value, Mapping) and all(
            _is_token_id(_token_key(key))
            and isinstance(bias, numbers.Real) and not isinstance(bias, bool)
            and math.isfinite(bias) and abs(float(bias)) <= self.limit
            for key, bias in value.items()
        )
        if not ok:
            _reject(self.name, value, where,
                    f"a mapping of token id (integer >= 0) to a bias in [-{self.limit:g}, {self.limit:g}]")


def _token_key(key: Any) -> Any:
    """A ``logit_bias`` key as an integer: ``5`` and ``"5"`` are the same token."""
    if isinstance(key, str) and key.strip().isdigit():
        return int(key)
    return key


def bias_items(value: Mapping[Any, float]) -> list[tuple[int, float]]:
    """The ``(token id, bias)`` pairs of a validated ``logit_bias`` mapping."""
    return [(int(_token_key(key)), float(bias)) for key, bias in value.items()]


def check_in_vocab(name: str, token_ids: Iterable[int], vocab_size: int, where: str) -> None:
    """Raise ``ValueError`` when a token id of parameter ``name`` is outside ``[0, vocab_size)``."""
    outside = sorted({t for t in token_ids if t >= vocab_size})
    if outside:
        raise ValueError(
            f"{where}: {name} holds token ids {outside[:5]} outside the vocabulary [0, {vocab_size}); "
            "use ids of the model's tokenizer"
        )
