"""Adaptive draft length: how many draft nodes are worth verifying for each request.

Every draft node gets an acceptance probability - the
proposer's score when the draft has scores (proposers score nodes with the probability that they
are accepted), scaled by how the request's scored drafts fared so far (accepted nodes over the sum
of their scores); without scores, the request's measured per-token acceptance rate to the power of
the node's depth. The engine times its decode steps by the number of tokens in them
(:class:`~pyagent_engine.spec.plan.StepCosts`) and keeps, over the whole batch, the
most probable nodes in the number that maximises expected tokens per second
(:func:`~pyagent_engine.spec.plan.choose_nodes`): a step verifies drafts only when they
are expected to pay for themselves. Requests with unscored drafts that keep failing stop drafting
and are re-probed with a one-token draft now and then; proposers that score are always asked.
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs

from pyagent_core.interfaces.proposer import ROOT, DraftTree
from pyagent_engine.spec.plan import Candidate, StepCosts, choose_nodes
from pyagent_engine.spec.tree import subtree


@attrs.define
class _RequestRate:
    """A request's decayed counts of accepted draft tokens and of rejections."""

    accepted: float = 0.0
    rejected: float = 0.0
    idle_steps: int = 0
    probing: bool = False
    scored_accepted: float = 0.0
    scored_expected: float = 0.0


class DraftController:
    """Decides how many draft nodes are worth verifying for each request (module docstring).

    Args:
        max_tokens: the most draft nodes per request and step.
        adaptive: ``False`` always asks for ``max_tokens`` and keeps every node.
        prior_rate: the per-token acceptance rate assumed for a new request.
        prior_cost: the cost of one more token relative to a one-token step, assumed until decode
            steps of different sizes have been timed.
        margin: probabilities are divided by this before they are weighed against costs.
        probe_every: a request that stopped drafting gets a one-token draft after this many steps.
        decay: forgetting factor of the acceptance counts and of the step-time fit.
    """

    def __init__(self, max_tokens: int, *, adaptive: bool = True, prior_rate: float = 0.6,
                 prior_cost: float = 0.05, margin: float = 1.25, probe_every: int = 16, decay: float = 0.9) -> None:
        self.max_tokens = max_tokens
        self.adaptive = adaptive
        self.prior_rate = prior_rate
        self.prior_cost = prior_cost
        self.margin = margin
        self.probe_every = probe_every
        self.decay = decay
        self.rates: dict[str, _RequestRate] = {}
        self.scored = False
        """Whether the proposer scores its drafts (seen once): then every request is asked for drafts."""
        self.costs = StepCosts(prior_slope=prior_cost, decay=decay)
        """Decode-step times by tokens per step."""

    def observe_step(self, num_tokens: int, step_time: float) -> None:
        """Add one decode step (no prefill in it) to the step costs."""
        self.costs.observe(num_tokens, step_time)

    def token_cost(self) -> float:
        """``t1 / t0``: the fitted cost of one more token relative to a step's fixed cost."""
        return self.costs.token_cost()

    def threshold(self, batch: int) -> float:
        """Break-even acceptance probability of one more draft node in a step of ``batch`` decodes."""
        cost = self.token_cost() * max(batch, 1)
        return self.margin * cost / (1 + cost)

    def rate(self, request_id: str) -> float:
        """The request's estimated chance that a draft token is accepted given its parent was."""
        state = self.rates.get(request_id)
        weight = 2.0
        if state is None:
            return self.prior_rate
        return (state.accepted + weight * self.prior_rate) / (state.accepted + state.rejected + weight)

    def budget(self, request_id: str, threshold: float) -> int:
        """How many draft nodes to ask for: the depth at which ``rate ** depth`` falls below ``threshold``."""
        if not self.adaptive or self.scored:
            return self.max_tokens
        rate, state = self.rate(request_id), self.rates.setdefault(request_id, _RequestRate())
        depth, chance = 0, 1.0
        while depth < self.max_tokens and chance * rate >= threshold:
            depth, chance = depth + 1, chance * rate
        if depth == 0:
            state.idle_steps += 1
            if state.idle_steps >= self.probe_every:
                state.idle_steps = 0
                state.probing = True
                return 1
        return depth

    def score_factor(self, request_id: str) -> float:
        """How the request's scored drafts fared: accepted nodes over the sum of their scores,
        shrunk towards 1 while there is little evidence, within [0.25, 2]."""
        state = self.rates.get(request_id)
        if state is None:
            return 1.0
        weight = 2.0
        return min(max((state.scored_accepted + weight) / (state.scored_expected + weight), 0.25), 2.0)

    def probabilities(self, request_id: str, draft: DraftTree) -> list[float]:
        """Each node's estimated chance of being accepted (module docstring), never above its
        parent's (a node is accepted only after its parent)."""
        if draft.scores is None:
            rate = self.rate(request_id)
            return [rate**depth for depth in draft.node_depths()]
        factor = self.score_factor(request_id)
        chances = [min(max(score, 0.0) * factor, 1.0) for score in draft.scores]
        for node, parent in enumerate(draft.parents):
            if parent != ROOT and chances[node] > chances[parent]:
                chances[node] = chances[parent]
        return chances

    def plan(self, drafts: Sequence[tuple[str, DraftTree, int]], batch: int) -> list[DraftTree | None]:
        """This step's drafts (request id, draft, most nodes allowed) cut to the nodes worth verifying
        in a step of ``batch`` decoding requests: the most probable ones, as many as maximise
        expected tokens per second (a probing request keeps its first node)."""
        if not self.adaptive:
            return [subtree(draft, range(min(limit, len(draft)))) for _, draft, limit in drafts]
        candidates: list[Candidate] = []
        forced: list[Candidate] = []
        for owner, (request_id, draft, limit) in enumerate(drafts):
            self.scored = self.scored or draft.scores is not None
            probabilities, depths = self.probabilities(request_id, draft), draft.node_depths()
            best = sorted(range(len(draft)), key=lambda i: (-probabilities[i], depths[i]))[:limit]
            state = self.rates.get(request_id)
            if state is not None and state.probing and best:
                state.probing = False
                first = best.pop(0)
                forced.append(Candidate(owner, first, probabilities[first], depths[first]))
            candidates += [Candidate(owner, i, probabilities[i], depths[i]) for i in best]
        kept: list[list[int]] = [[] for _ in drafts]
        for candidate in forced + choose_nodes(candidates, batch + len(forced), self.costs, self.margin):
            kept[candidate.owner].append(candidate.node)
        return [subtree(draft, sorted(nodes)) for (_, draft, _), nodes in zip(drafts, kept, strict=True)]

    def verified(self, request_id: str, accepted: int, depth: int, expected: float | None = None) -> None:
        """Update the request's acceptance counts: ``accepted`` of a draft ``depth`` deep, whose
        scores (if any) summed to ``expected``."""
        state = self.rates.setdefault(request_id, _RequestRate())
        state.accepted = state.accepted * self.decay + accepted
        state.rejected = state.rejected * self.decay + (1 if accepted < depth else 0)
        state.idle_steps = 0
        if expected is not None:
            state.scored_accepted = state.scored_accepted * self.decay + accepted
            state.scored_expected = state.scored_expected * self.decay + expected

    def forget(self, request_id: str) -> None:
        """Drop a finished request's counts."""
        self.rates.pop(request_id, None)

