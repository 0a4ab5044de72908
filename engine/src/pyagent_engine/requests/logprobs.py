"""Log probabilities of tokens: the record the engine reports per token and how it is computed.

A request asks for them with ``SamplingParams.logprobs`` (every generated token) and
``SamplingParams.prompt_logprobs`` (every prompt token but the first, which follows nothing). Each
such token gets a :class:`TokenLogprob`: its log probability under the distribution of its position,
its rank in that distribution (1 + the number of tokens strictly more likely, as vLLM counts, so
tokens tied with the most likely have rank 1), and the ``k`` most likely tokens with their log
probabilities, most likely first, equal log probabilities by ascending token id.

Which distribution, for generated tokens, is the engine's ``logprobs_mode`` (:data:`LOGPROBS_MODES`):

- ``raw`` (the default, as OpenAI and vLLM): the log-softmax of the model's logits, before the
  grammar bitmask and every logits processor - what the model thinks, whatever the sampling settings;
- ``processed``: the log-softmax of the logits after the grammar bitmask and the whole processor
  chain, i.e. the distribution the token is drawn from: temperature sharpens or flattens it,
  top-k / top-p / min-p and the grammar give the tokens they remove ``-inf``, penalties and
  ``logit_bias`` shift it. Greedy requests take its most likely token (rank 1).

Prompt tokens are always scored ``raw``: processors act on what a request generates.

This module holds the record and is light to import; :mod:`pyagent_engine.sampling.logprob_scoring` computes it.
"""

from __future__ import annotations

from typing import Any

import attrs

LOGPROBS_MODES = ("raw", "processed")
MAX_LOGPROBS = 20
"""The most alternatives a request may ask for per token (OpenAI's limit for ``top_logprobs``)."""


@attrs.frozen
class TokenLogprob:
    """One token's log probability, its rank and the most likely alternatives at its position.

    Attributes:
        token_id: the token (generated, or the prompt's).
        logprob: its natural-log probability (``-inf`` when the distribution excludes it).
        rank: 1 + the number of tokens with a strictly larger log probability.
        top: ``(token_id, logprob)`` of the ``k`` most likely tokens, descending, ties by ascending id.
    """

    token_id: int
    logprob: float
    rank: int
    top: tuple[tuple[int, float], ...]

    def to_dict(self) -> dict[str, Any]:
        """The record as JSON-ready data (``-inf`` log probabilities become ``None``, which JSON can hold)."""
        def number(value: float) -> float | None:
            return None if value == float("-inf") else value

        return {"token_id": self.token_id, "logprob": number(self.logprob), "rank": self.rank,
                "top": [{"token_id": token, "logprob": number(value)} for token, value in self.top]}
