"""DRY ("don't repeat yourself"): penalise tokens that would extend a sequence already in the context."""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import torch

from pyagent_core.interfaces.sampler import SamplerContext
from pyagent_sampler_base.multi_param import MultiParamProcessor, ParamCheck, ParamRow
from pyagent_sampler_base.token_params import check_in_vocab, split_sequences
from pyagent_samplers_llamacpp.breakers import (
    DEFAULT_SEQUENCE_BREAKERS,
    BreakerTable,
    merge,
    sequence_breakers,
    string_breakers,
)
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


def breaker_limit(tokens: Sequence[int], breakers: BreakerTable) -> int:
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
    """A DRY row: its values and its sequence breakers (head token -> tails, see :mod:`.breakers`)."""

    def __init__(self, request: Any, values: dict[str, Any], breakers: BreakerTable) -> None:
        super().__init__(request, values)
        self.breakers = breakers

    def penalties(self) -> dict[int, float]:
        """The penalty of each token that would extend a repeat, from the row's context: llama.cpp's
        ``multiplier * base ** exponent`` in double (past FLT_MAX it becomes inf once stored as a float)."""
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
    such ``n`` counts; computed in double and stored as a float32, so a penalty past FLT_MAX makes
    the logit -inf, as in llama.cpp). Repeats do not reach back across a sequence breaker, and a
    single-token breaker is never penalised. ``dry_multiplier=0`` or ``dry_penalty_last_n=0`` turns
    it off.

    ``dry_sequence_breakers`` is a list of strings (llama.cpp's form, turned into head tokens and
    tails with the tokenizer of the :class:`SamplerContext`, see :mod:`.breakers`) or of token id
    sequences (first id the head, the rest its tail), or both. Unset, it is llama.cpp's default set
    (``"\\n"``, ``":"``, ``'"'``, ``"*"``) where the context offers a tokenizer, and no breakers where
    it does not; explicit strings without a tokenizer are refused.
    """

    request_params: ClassVar[tuple[ParamCheck, ...]] = (
        DRY_MULTIPLIER, DRY_BASE, DRY_ALLOWED_LENGTH, DRY_PENALTY_LAST_N, DRY_SEQUENCE_BREAKERS,
    )
    neutral: ClassVar[Mapping[str, Any]] = {
        "dry_multiplier": 0.0, "dry_base": 1.75, "dry_allowed_length": 2, "dry_penalty_last_n": -1,
        "dry_sequence_breakers": None,  # llama.cpp's default set, where there is a tokenizer
    }
    label: ClassVar[str] = "dry sampler"

    def __init__(self, options: Mapping[str, Any], context: SamplerContext) -> None:
        self._string_tables: dict[str, BreakerTable] = {}
        super().__init__(options, context)

    def is_argmax_invariant(self) -> bool:
        """False: the most likely token may be the one that extends a repeat."""
        return False

    def is_active(self, values: Mapping[str, Any]) -> bool:
        """Rows with a positive multiplier and a non-empty window."""
        return bool(values["dry_multiplier"] > 0 and values["dry_penalty_last_n"] != 0)

    def check_values(self, values: Mapping[str, Any], where: str) -> None:
        """Breaker token ids must lie in the vocabulary; breaker strings need the context's tokenizer."""
        breakers = values["dry_sequence_breakers"]
        if breakers is None:
            return
        texts, sequences = split_sequences(breakers)
        check_in_vocab("dry_sequence_breakers", [t for s in sequences for t in s], self.vocab_size, where)
        if texts and self.context.tokenizer_info is None:
            raise ValueError(
                f"{where}: dry_sequence_breakers holds strings {texts[:3]!r}, which need the model's tokenizer, "
                "and this host gives the sampler none (SamplerContext.tokenizer_info); pass token id "
                "sequences instead, e.g. [[198], [25, 220]]"
            )

    def breaker_table(self, breakers: Sequence[str | Sequence[int]] | None, where: str) -> BreakerTable:
        """The heads and tails of ``breakers`` (``None``: llama.cpp's default strings, or none
        without a tokenizer); string tables are built once per string and kept."""
        if breakers is None:
            if self.context.tokenizer_info is None:
                return {}
            breakers = DEFAULT_SEQUENCE_BREAKERS
        texts, sequences = split_sequences(breakers)
        return merge([sequence_breakers(sequences), *(self._string_table(text, where) for text in texts)])

    def _string_table(self, text: str, where: str) -> BreakerTable:
        table = self._string_tables.get(text)
        if table is None:
            assert self.context.tokenizer_info is not None  # check_values refused strings without one
            try:
                info = self.context.tokenizer_info()
            except Exception as error:  # the host says why its tokenizer cannot be described
                raise ValueError(f"{where}: dry_sequence_breakers holds strings, but the model's tokenizer "
                                 f"is unavailable to samplers ({type(error).__name__}: {error}); pass token "
                                 "id sequences instead") from error
            if info.encode is None:
                raise ValueError(f"{where}: dry_sequence_breakers holds strings, but the host's tokenizer has "
                                 "no encode to tokenize them with; pass token id sequences instead")
            table = self._string_tables[text] = string_breakers(text, info.vocab, info.encode)
        return table

    def make_row(self, request: Any, values: dict[str, Any]) -> DryRow:
        """A :class:`DryRow` with the breakers turned into heads and tails (an inactive row needs none)."""
        if not self.is_active(values):
            return DryRow(request, values, {})
        breakers = values["dry_sequence_breakers"]
        try:
            table = self.breaker_table(breakers, request.where)
        except ValueError:
            if breakers is not None:
                raise
            warnings.warn("dry sampler: llama.cpp's default sequence breakers need the model's tokenizer, "
                          "which is unavailable; running without breakers", RuntimeWarning, stacklevel=2)
            table = {}
        return DryRow(request, values, table)

    def process(self, logits: torch.Tensor, rows: list[int]) -> torch.Tensor:
        """Subtract each row's penalties from its logits (float32 penalties: inf past FLT_MAX)."""
        at_rows: list[int] = []
        at_tokens: list[int] = []
        values: list[float] = []
        for i, row in enumerate(rows):
            for token, value in self.rows[row].penalties().items():
                at_rows.append(i)
                at_tokens.append(token)
                values.append(value)
        penalty = torch.zeros(logits.shape, dtype=torch.float32)
        where = (torch.tensor(at_rows, dtype=torch.long), torch.tensor(at_tokens, dtype=torch.long))
        penalty[where] = torch.tensor(values, dtype=torch.float64).to(torch.float32)
        return logits.to(torch.promote_types(logits.dtype, torch.float32)) - penalty.to(logits.device)
