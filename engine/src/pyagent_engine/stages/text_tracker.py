"""Per-request text: incremental detokenization, stop strings and the deltas that stream out."""

from __future__ import annotations

from collections.abc import Sequence

from pyagent_engine.models.detokenizer import IncrementalDetokenizer
from pyagent_engine.models.tokenizer import Tokenizer


def held_back(text: str, stops: Sequence[str]) -> int:
    """How many trailing characters of ``text`` could still be the start of a stop string."""
    longest = 0
    for stop in stops:
        for size in range(min(len(stop) - 1, len(text)), longest, -1):
            if text.endswith(stop[:size]):
                longest = size
                break
    return longest


class TextTracker:
    """Turns a request's new tokens into text, ends it at a stop string, and yields stream deltas.

    Text that might be the beginning of a stop string is held back from the deltas until it is
    known not to be one; a matched stop string, and everything after it, never appears.
    """

    def __init__(self, tokenizer: Tokenizer, prompt_ids: Sequence[int], stops: Sequence[str]) -> None:
        self.detokenizer = IncrementalDetokenizer(tokenizer, prompt_ids)
        self.stops = tuple(stops)
        self.text = ""
        self.emitted = 0
        self.stopped = False

    def add(self, token_id: int) -> None:
        """Append one generated token; sets :attr:`stopped` when a stop string appears."""
        self._extend(self.detokenizer.add([token_id]))

    def finish(self) -> None:
        """Flush what the detokenizer held back (an incomplete character at the very end)."""
        if not self.stopped:
            self._extend(self.detokenizer.finish())

    def _extend(self, delta: str) -> None:
        if not delta or self.stopped:
            return
        start = max(0, len(self.text) - max((len(s) for s in self.stops), default=0))
        self.text += delta
        hits = [i for i in (self.text.find(s, start) for s in self.stops) if i >= 0]
        if hits:
            self.text = self.text[: min(hits)]
            self.stopped = True

    def delta(self, final: bool) -> str:
        """The text not reported yet; while not ``final``, minus a possible stop-string prefix."""
        end = len(self.text) if final or self.stopped else len(self.text) - held_back(self.text, self.stops)
        out = self.text[self.emitted:end]
        self.emitted = max(self.emitted, end)
        return out
