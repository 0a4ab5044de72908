"""The engine's per-token log probabilities (:mod:`pyagent_engine.requests.logprobs`) in OpenAI's two shapes.

Chat: ``{"content": [{"token", "logprob", "bytes", "top_logprobs": [{"token", "logprob", "bytes"}]}]}``.
Completions: ``{"tokens", "token_logprobs", "top_logprobs", "text_offset"}``, where ``top_logprobs`` maps
token texts to log probabilities (the chosen token's among them, as vLLM does) and the first prompt token
of an echoed prompt has ``None``. A log probability of ``-inf`` (a token the distribution excludes) is
written ``-9999.0``, as vLLM does: JSON has no infinity.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pyagent_engine.requests.logprobs import TokenLogprob

LOWEST = -9999.0
"""What ``-inf`` is written as."""


def _number(value: float) -> float:
    return max(value, LOWEST)


class LogprobWriter:
    """Writes records with each token's bytes and text.

    A token that is not whole UTF-8 on its own (a piece of an emoji) is written ``bytes:\\xf0\\x9f``, as
    vLLM does; its ``bytes`` hold the raw bytes, so joining a reply's bytes gives its text.

    Args:
        vocab: the bytes of each token id (``TokenizerInfo.vocab``).
    """

    def __init__(self, vocab: Sequence[bytes]) -> None:
        self.vocab = vocab

    def text(self, token_id: int) -> str:
        """The text of one token (``bytes:...`` when it is not whole UTF-8)."""
        raw = self.vocab[token_id]
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            return "bytes:" + "".join(f"\\x{byte:02x}" for byte in raw)

    def _entry(self, token_id: int, logprob: float) -> dict[str, Any]:
        return {"token": self.text(token_id), "logprob": _number(logprob), "bytes": list(self.vocab[token_id])}

    def chat(self, records: Sequence[TokenLogprob]) -> dict[str, Any]:
        """A chat choice's ``logprobs`` for ``records``."""
        content = [{**self._entry(r.token_id, r.logprob), "top_logprobs": [self._entry(t, lp) for t, lp in r.top]}
                   for r in records]
        return {"content": content, "refusal": None}

    def completion(self, token_ids: Sequence[int], records: Sequence[TokenLogprob | None],
                   written: bytes) -> tuple[dict[str, Any], bytes]:
        """A completion choice's ``logprobs`` for ``token_ids`` (their records beside them), after the
        choice's ``written`` bytes (text offsets count from there); and the bytes written after them."""
        tokens: list[str] = []
        chosen: list[float | None] = []
        tops: list[dict[str, float] | None] = []
        offsets: list[int] = []
        for token_id, record in zip(token_ids, records, strict=True):
            text = self.text(token_id)
            tokens.append(text)
            offsets.append(len(written.decode("utf-8", errors="ignore")))
            written += self.vocab[token_id]
            if record is None:
                chosen.append(None)
                tops.append(None)
                continue
            chosen.append(_number(record.logprob))
            top = {self.text(t): _number(lp) for t, lp in record.top}
            tops.append({**top, text: _number(record.logprob)})
        return {"tokens": tokens, "token_logprobs": chosen, "top_logprobs": tops, "text_offset": offsets}, written
