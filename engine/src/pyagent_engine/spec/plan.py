"""How many draft nodes a step verifies: a learned step-cost curve and the choice that maximises throughput.

A decode step that verifies ``K`` draft nodes for ``B`` requests computes ``B + K`` tokens and
yields, in expectation, ``B`` plus the sum of the chosen nodes' acceptance probabilities. Given each
node's probability (:func:`choose_nodes`), the best choice is the ``K`` most probable nodes for the
``K`` that maximises expected tokens per second: ``(B + sum of the K best p) / cost(B + K)``. Taking
nodes in order of probability keeps every chosen node's parent chosen (a node is never more probable
than its parent). The cost curve is measured, not assumed (:class:`StepCosts`): on a CPU the
linear kernels process rows in tiles, so a step of 5 tokens can cost much more than one of 4, and
a straight line would misjudge exactly the small drafts that matter most.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence

import attrs


class StepCosts:
    """Decode-step time as a function of the tokens in the step, learned from the steps run.

    Each token count seen keeps a decayed mean of its step times; counts not seen yet are
    interpolated between the nearest seen ones, or extrapolated from the nearest one along a
    decayed least-squares line over all steps (``prior_slope`` of the time per token, relative to
    the time of a one-token step, until the line can be fitted). Unseen sizes therefore look no
    worse than the line says, so they get tried, and once tried their own measurements take over.

    Args:
        prior_slope: the relative cost of one more token assumed before any fit.
        decay: weight kept by the older measurements at each new one.
    """

    def __init__(self, *, prior_slope: float = 0.05, decay: float = 0.9) -> None:
        self.prior_slope = prior_slope
        self.decay = decay
        self.means: dict[int, float] = {}
        self._seen: list[int] = []
        self._fit = [0.0] * 5  # decayed sums: n, x, y, xx, xy of (tokens, step time)

    def observe(self, tokens: int, seconds: float) -> None:
        """Add one decode step of ``tokens`` tokens that took ``seconds``."""
        mean = self.means.get(tokens)
        if mean is None:
            bisect.insort(self._seen, tokens)
            self.means[tokens] = seconds
        else:
            self.means[tokens] = self.decay * mean + (1 - self.decay) * seconds
        n, x, y, xx, xy = (v * 0.98 for v in self._fit)
        self._fit = [n + 1, x + tokens, y + seconds, xx + tokens**2, xy + tokens * seconds]

    def line(self) -> tuple[float, float] | None:
        """``(intercept, slope)`` of the fitted line (slope >= 0), or ``None`` while it cannot be fitted."""
        n, x, y, xx, xy = self._fit
        spread = n * xx - x * x
        if n < 4 or spread <= 1e-9 * max(n * xx, 1.0):
            return None
        slope = max((n * xy - x * y) / spread, 0.0)
        return (y - slope * x) / n, slope

    def predict(self, tokens: int) -> float:
        """The expected time of a step of ``tokens`` tokens (in the units observed; relative before any)."""
        mean = self.means.get(tokens)
        if mean is not None:
            return mean
        seen = self._seen
        at = bisect.bisect_left(seen, tokens)
        if 0 < at < len(seen):
            low, high = seen[at - 1], seen[at]
            return self.means[low] + (self.means[high] - self.means[low]) * (tokens - low) / (high - low)
        fitted = self.line()
        if not seen:
            return 1.0 + self.prior_slope * (tokens - 1) if fitted is None else fitted[0] + fitted[1] * tokens
        anchor = seen[0] if at == 0 else seen[-1]
        slope = self.means[anchor] * self.prior_slope if fitted is None else fitted[1]
        return max(self.means[anchor] + slope * (tokens - anchor), 1e-9)

    def token_cost(self) -> float:
        """The fitted time of one more token over a step's fixed time (``prior_slope`` before a fit)."""
        fitted = self.line()
        if fitted is None or fitted[0] <= 0:
            return self.prior_slope
        return fitted[1] / fitted[0]


@attrs.frozen
class Candidate:
    """A draft node offered to a step: which request (``owner``), which node, its acceptance
    probability and its depth (ties between equal probabilities go to the shallower node)."""

    owner: int
    node: int
    probability: float
    depth: int


def choose_nodes(candidates: Sequence[Candidate], batch: int, costs: StepCosts,
                 margin: float = 1.0) -> list[Candidate]:
    """The most probable candidates, as many as maximise ``(batch + sum p / margin) / cost(batch + K)``.

    ``margin`` > 1 discounts the probabilities, so a node must be clearly worth its cost.
    """
    ranked = sorted(candidates, key=lambda c: (-c.probability, c.depth))
    best, best_value, expected = 0, batch / costs.predict(batch), float(batch)
    for k, candidate in enumerate(ranked, 1):
        expected += candidate.probability / margin
        value = expected / costs.predict(batch + k)
        if value > best_value:
            best, best_value = k, value
    return ranked[:best]
