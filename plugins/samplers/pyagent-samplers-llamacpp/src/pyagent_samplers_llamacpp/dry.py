"""DRY ("don't repeat yourself"): penalise tokens that would extend a sequence already in the context."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import torch

from pyagent_sampler_base.multi_param import MultiParamProcessor, ParamCheck, ParamRow
from pyagent_sampler_base.token_params import check_in_vocab
from pyagent_samplers_llamacpp.params import (
    DRY_ALLOWED_LENGTH,
    DRY_BASE,
    DRY_MULTIPLIER,
    DRY_PENALTY_LAST_N,
    DRY_SEQUENCE_BREAKERS,
)

# ln(FLT_MAX): the exponent is clamped so that base ** exponent stays a finite float32.
FLOAT_MAX_LOG = 88.7228391


def suffix_matches(tokens: Sequence[int]) -> list[int]:
    """For each position ``i``, the length of the longest common suffix of ``tokens[:i + 1]`` and
    ``tokens`` (the Z-function of the reversed sequence); the last position is left at 0.
    """
    reverse = list(reversed(tokens))
    n = len(reverse)
    z = [0] * n
    left = right = 0
    for k in range(1, n):
        length = min(right - k, z[k - left]) if k < right else 0
        while k + length < n and reverse[length] == reverse[k + length]:
            length += 1
        z[k] = length
        if k + length > right:
            left, right = k, k + length
    return [z[n - 1 - i] if i < n - 1 else 0 for i in range(n)]


def breaker_limit(tokens: Sequence[int], breakers: Mapping[int, list[tuple[int, ...]]]) -> int:
    """How far back a repeat may reach: the distance from the end to the latest sequence breaker.

    ``breakers`` maps a breaker's first token to the rest of each breaker starting with it; the
    latest complete breaker ``i`` tokens from the end limits repeats to ``i - len(rest)`` tokens.
    """
    n = len(tokens)
    for i in range(n):
        tails = breakers.get(tokens[n - 1 - i])
        if tails is None:
            continue
        matched = [len(t) for t in tails if len(t) <= i and all(
            t[offset] == tokens[n - i + offset] for offset in range(len(t)))]
        if matched:
            return i - max(matched)
    return n


class DryRow(ParamRow):
    """A DRY row: its values and its sequence breakers indexed by their first token."""

    def __init__(self, request: Any, values: dict[str, Any]) -> None:
        super().__init__(request, values)
        self.breakers: dict[int, list[tuple[int, ...]]] = {}
        for sequence in values["dry_sequence_breakers"]:
            self.breakers.setdefault(int(sequence[0]), []).append(tuple(int(t) for t in sequence[1:]))

    def penalties(self) -> dict[int, float]:
        """The penalty of each token that would extend a repeat, from the row's context."""
        multiplier, base = self.values["dry_multiplier"], self.values["dry_base"]
        allowed, last_n = self.values["dry_allowed_length"], self.values["dry_penalty_last_n"]
        tokens = self.context(None if last_n == -1 else last_n)
        if len(tokens) <= allowed:
            return {}
        limit = breaker_limit(tokens, self.breakers)
        if limit < allowed:
            return {}
        longest: dict[int, int] = {}
        for position, length in enumerate(suffix_matches(tokens)[:-1]):
            length = min(length, limit)
            if length >= allowed:
                following = tokens[position + 1]
                longest[following] = max(longest.get(following, 0), length)
        max_exponent = int(FLOAT_MAX_LOG / math.log(base)) if base > 1.000001 else 0
        single_breakers = {head for head, tails in self.breakers.items() if () in tails}
        penalties = {}
        for token, length in longest.items():
            if token not in single_breakers:
                exponent = length - allowed
                if max_exponent > 0:
                    exponent = min(exponent, max_exponent)
                penalties[token] = multiplier * base**exponent
        return penalties


class DryProcessor(MultiParamProcessor):
    """llama.cpp's DRY sampler (``--dry-multiplier`` and friends) over each row's prompt and output.

    A token that would extend a sequence of ``n >= dry_allowed_length`` tokens that already occurs
    earlier in the last ``dry_penalty_last_n`` tokens of the context (prompt and output; -1: all of
    it) loses ``dry_multiplier * dry_base ** (n - dry_allowed_length)`` from its logit (the longest
    such ``n`` counts). Repeats do not reach back across a sequence breaker (``dry_sequence_breakers``:
    token id sequences), and a single-token breaker is never penalised. ``dry_multiplier=0`` or
    ``dry_penalty_last_n=0`` turns it off.
    """

    request_params: ClassVar[tuple[ParamCheck, ...]] = (
        DRY_MULTIPLIER, DRY_BASE, DRY_ALLOWED_LENGTH, DRY_PENALTY_LAST_N, DRY_SEQUENCE_BREAKERS,
    )
    neutral: ClassVar[Mapping[str, Any]] = {
        "dry_multiplier": 0.0, "dry_base": 1.75, "dry_allowed_length": 2, "dry_penalty_last_n": -1,
        "dry_sequence_breakers": (),
    }
    label: ClassVar[str] = "dry sampler"

    def is_argmax_invariant(self) -> bool:
        """False: the most likely token may be the one that extends a repeat."""
        return False

    def is_active(self, values: Mapping[str, Any]) -> bool:
        """Rows with a positive multiplier and a non-empty window."""
        return bool(values["dry_multiplier"] > 0 and values["dry_penalty_last_n"] != 0)

    def check_values(self, values: Mapping[str, Any], where: str) -> None:
        """Breaker token ids must lie in the vocabulary."""
        check_in_vocab("dry_sequence_breakers", [t for s in values["dry_sequence_breakers"] for t in s],
                       self.vocab_size, where)

    def make_row(self, request: Any, values: dict[str, Any]) -> DryRow:
        """A :class:`DryRow` with the breakers indexed."""
        return DryRow(request, values)

    def process(self, logits: torch.Tensor, rows: list[int]) -> torch.Tensor:
        """Subtract each row's penalties from its logits."""
        penalty = torch.zeros(logits.shape, dtype=torch.float32)
        for i, row in enumerate(rows):
            for token, value in self.rows[row].penalties().items():
                penalty[i, token] = value
        return logits.to(torch.promote_types(logits.dtype, torch.float32)) - penalty.to(logits.device)
