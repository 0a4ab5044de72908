"""Mirostat v1 and v2: truncate each row so that the sampled tokens' surprise tracks a target."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, ClassVar

import torch

from pyagent_sampler_base.multi_param import MultiParamProcessor, ParamCheck, ParamRow
from pyagent_samplers_llamacpp.params import MIROSTAT, MIROSTAT_ETA, MIROSTAT_TAU

# Tokens mirostat v1 uses to estimate the Zipf exponent (llama.cpp's m).
ZIPF_TOKENS = 100


class MirostatRow(ParamRow):
    """A mirostat row: the running maximum surprise ``mu`` and the distribution offered last step."""

    def __init__(self, request: Any, values: dict[str, Any]) -> None:
        super().__init__(request, values)
        self.mu = 2.0 * values["mirostat_tau"]
        self.offered: torch.Tensor | None = None
        self.offered_at = 0

    def learn(self) -> None:
        """Update ``mu`` from the token chosen after the last step: ``mu -= eta * (surprise - tau)``.

        The surprise is ``-log2 p`` of that token in the truncated distribution this row offered; a
        token that distribution did not contain (chosen by a later processor's doing) teaches nothing.
        """
        outputs = self.request.output_token_ids
        if self.offered is None or len(outputs) <= self.offered_at:
            return
        probability = float(self.offered[outputs[self.offered_at]])
        self.offered = None
        if probability > 0:
            surprise = -math.log2(probability)
            self.mu -= self.values["mirostat_eta"] * (surprise - self.values["mirostat_tau"])

    def keep(self, probs: torch.Tensor, candidates: int, vocab_size: int) -> torch.Tensor:
        """The boolean mask of the tokens this row keeps this step (at least the most probable one)."""
        if self.values["mirostat"] == 2:
            kept = -torch.log2(probs) <= self.mu
            count = int(kept.sum())
        else:
            count = self.zipf_top_k(probs, candidates, vocab_size)
            kept = torch.zeros_like(probs, dtype=torch.bool)
        if count == 0 or self.values["mirostat"] == 1:
            # the `count` most probable tokens, the lower id first among equal probabilities
            kth = torch.topk(probs, max(count, 1)).values[-1]
            kept = probs > kth
            ties = (probs == kth).nonzero().flatten()[: max(count, 1) - int(kept.sum())]
            kept[ties] = True
        return kept

    def zipf_top_k(self, probs: torch.Tensor, candidates: int, vocab_size: int) -> int:
        """Mirostat 1's k, from the Zipf exponent estimated over the most probable tokens.

        ``k = (e * 2**mu / (1 - V**-e)) ** (1 / s)`` with ``e = s - 1``, taken to its limit where the
        formula divides by zero: an exactly flat head (``s = 0``) gives ``(2**mu / (V - 1)) ** inf``,
        so k is 0 (one token kept) when ``2**mu < V - 1``, every candidate when ``2**mu > V - 1``
        and 1 when they are equal; ``s = 1`` gives ``k = 2**mu / ln V``.
        """
        m = min(ZIPF_TOKENS - 1, candidates - 1)
        top = torch.topk(probs, m + 1).values.double()
        ranks = torch.arange(m, dtype=torch.float64)
        t = torch.log((ranks + 2) / (ranks + 1))
        b = torch.log(top[:m] / top[1:m + 1])
        s_hat = float((t * b).sum() / (t * t).sum())
        epsilon_hat = s_hat - 1
        try:
            if s_hat == 0:
                ratio = 2**self.mu / (vocab_size - 1)
                k = 0.0 if ratio < 1 else math.inf if ratio > 1 else 1.0
            elif 1 - vocab_size ** -epsilon_hat == 0:
                k = 2**self.mu / math.log(vocab_size)
            else:
                k = (epsilon_hat * 2**self.mu / (1 - vocab_size ** -epsilon_hat)) ** (1 / s_hat)
        except OverflowError:  # 2**mu or the power past the largest double: k is past every count
            return candidates
        if isinstance(k, complex) or not math.isfinite(k):
            return candidates
        return min(candidates, max(int(k), 1))


class MirostatProcessor(MultiParamProcessor):
    """llama.cpp's mirostat (``--mirostat 1|2``, ``--mirostat-ent`` tau, ``--mirostat-lr`` eta).

    Each row keeps a running ``mu`` (starting at ``2 * tau``). Mirostat 2 keeps the tokens whose
    surprise ``-log2 p`` is at most ``mu``; mirostat 1 estimates the Zipf exponent ``s`` from the 100
    most probable tokens and keeps the top ``k = (e * 2**mu / (1 - V**-e)) ** (1 / s)`` with ``e = s - 1``
    (ties broken by lower token id). At least one token stays. The next step reads the token the
    request chose and sets ``mu -= eta * (-log2 p - tau)`` with ``p`` its probability in the truncated
    distribution. Put it last among the processors (after temperature), as llama.cpp does; its
    selector is the chain's ``multinomial``. ``mirostat=0`` turns it off.
    """

    request_params: ClassVar[tuple[ParamCheck, ...]] = (MIROSTAT, MIROSTAT_TAU, MIROSTAT_ETA)
    neutral: ClassVar[Mapping[str, Any]] = {"mirostat": 0, "mirostat_tau": 5.0, "mirostat_eta": 0.1}
    label: ClassVar[str] = "mirostat sampler"

    def is_argmax_invariant(self) -> bool:
        """True: the most probable token always stays."""
        return True

    def is_active(self, values: Mapping[str, Any]) -> bool:
        """Rows with ``mirostat`` 1 or 2."""
        return bool(values["mirostat"] in (1, 2))

    def make_row(self, request: Any, values: dict[str, Any]) -> MirostatRow:
        """A :class:`MirostatRow` with ``mu = 2 * tau``."""
        return MirostatRow(request, values)

    def process(self, logits: torch.Tensor, rows: list[int]) -> torch.Tensor:
        """Learn from last step's choice, then keep each row's most probable tokens."""
        scores = logits.float()
        probs = scores.softmax(dim=-1)
        candidates = torch.isfinite(scores).sum(dim=-1).tolist()
        remove = torch.zeros_like(scores, dtype=torch.bool)
        for i, row in enumerate(rows):
            state: MirostatRow = self.rows[row]
            state.learn()
            remove[i] = ~state.keep(probs[i], int(candidates[i]), self.vocab_size)
        scores = scores.masked_fill(remove, float("-inf"))
        offered = scores.softmax(dim=-1)
        for i, row in enumerate(rows):
            state = self.rows[row]
            state.offered, state.offered_at = offered[i], len(state.request.output_token_ids)
        return scores
