"""Conformance kit for speculative proposers: simulated decoding runs with a random verifier.

A run starts a few requests with repetitive prompts (so n-gram and lookup proposers have something
to find), then for a number of steps asks for drafts, checks them, accepts a random prefix of a
random branch, appends it plus one bonus token to the request's output, reports the outcome with
``on_verified``, and finishes and adds requests along the way.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import ClassVar

import pytest

from pyagent_core.interfaces.proposer import DraftTree, Proposer, ProposerContext, ProposerRequest
from pyagent_core.testing.base import BackendConformance
from pyagent_core.types import ProposerSpec


def repetitive_tokens(rng: random.Random, length: int, vocab_size: int) -> list[int]:
    """``length`` tokens made of a short random motif repeated, with occasional noise."""
    motif = [rng.randrange(vocab_size) for _ in range(rng.randint(2, 6))]
    return [rng.randrange(vocab_size) if rng.random() < 0.1 else motif[i % len(motif)] for i in range(length)]


class ProposerConformance(BackendConformance):
    """Kit for :class:`Proposer` s. Set ``impl`` and ``spec``; override :meth:`make_context` for
    proposers that need more than the vocabulary and context length (a ``needs_model`` proposer
    gets its target model, registry and attention selection there).

    ``expects_drafts`` says the proposer should draft something for repetitive text; set it to
    ``False`` for proposers that legitimately never do on the kit's inputs.
    """

    kind = "proposer"
    spec: ClassVar[ProposerSpec]
    vocab_size: ClassVar[int] = 64
    max_model_len: ClassVar[int] = 4096
    expects_drafts: ClassVar[bool] = True
    steps: ClassVar[int] = 12

    def make_context(self) -> ProposerContext:
        """The context the proposer under test is built with: the kit's vocabulary and context length."""
        return ProposerContext(vocab_size=self.vocab_size, max_model_len=self.max_model_len)

    def make_proposer(self, **options: object) -> Proposer:
        """Construct the proposer under test; ``options`` override the class's ``options``."""
        proposer: Proposer = self.impl(self.make_options(**options), self.make_context())
        return proposer

    def check_drafts(
        self, drafts: object, requests: Sequence[ProposerRequest], max_tokens: int
    ) -> list[DraftTree | None]:
        """Assert ``drafts`` is a valid answer to ``propose(requests, max_tokens)``."""
        assert isinstance(drafts, list) and len(drafts) == len(requests), (
            f"propose() must return a list of {len(requests)} entries (one per request), got {drafts!r}"
        )
        for request, draft in zip(requests, drafts, strict=True):
            if draft is None:
                continue
            label = f"draft for {request.request_id} (max_tokens={max_tokens})"
            assert isinstance(draft, DraftTree), f"{label} is {type(draft).__name__}, not DraftTree or None"
            try:  # a DraftTree.trusted draft skipped these checks
                checked = DraftTree(draft.token_ids, draft.parents, draft.scores)
            except ValueError as error:
                raise AssertionError(f"{label} is not a valid draft tree: {error}") from None
            assert checked == draft, f"{label} does not hold tuples of ints (and floats) as DraftTree(...) would"
            assert len(draft) <= max_tokens, f"{label} has {len(draft)} nodes"
            assert self.spec.tree or draft.is_chain(), f"{label} is a tree but the spec says tree=False"
            outside = [t for t in draft.token_ids if not 0 <= t < self.vocab_size]
            assert not outside, f"{label} has token ids {outside} outside the vocab [0, {self.vocab_size})"
        return drafts

    def simulate(self, proposer: Proposer, seed: int, max_tokens: int) -> list[list[DraftTree | None]]:
        """Run the scenario in the module docstring; return the drafts of every step."""
        rng = random.Random(seed)
        live: dict[str, ProposerRequest] = {}
        outputs: dict[str, list[int]] = {}
        history: list[list[DraftTree | None]] = []
        for step in range(self.steps):
            if step % 4 == 0:
                for n in range(rng.randint(1, 3)):
                    request_id = f"req-{step}-{n}"
                    prompt = repetitive_tokens(rng, rng.randint(1, 40), self.vocab_size)
                    outputs[request_id] = []
                    live[request_id] = ProposerRequest(request_id, prompt, outputs[request_id])
            requests = list(live.values())
            drafts = self.check_drafts(proposer.propose(requests, max_tokens), requests, max_tokens)
            history.append(drafts)
            for request, draft in zip(requests, drafts, strict=True):
                accepted = []
                if draft is not None:
                    path = draft.path(rng.randrange(len(draft)))
                    accepted = [draft.token_ids[i] for i in path[: rng.randint(0, len(path))]]
                outputs[request.request_id].extend([*accepted, rng.randrange(self.vocab_size)])
                if draft is not None:
                    proposer.on_verified(request.request_id, len(accepted))
            for request_id in list(live):
                if rng.random() < 0.2:
                    proposer.on_finished(request_id)
                    del live[request_id]
        for request_id in live:
            proposer.on_finished(request_id)
        return history

    def test_drafts_are_valid(self) -> None:
        for seed, max_tokens in enumerate((1, 2, 5, 8)):
            self.simulate(self.make_proposer(), seed, max_tokens)

    def test_max_tokens_zero_gives_no_drafts(self) -> None:
        history = self.simulate(self.make_proposer(), seed=7, max_tokens=0)
        assert all(d is None for step in history for d in step), "propose(..., max_tokens=0) drafted"

    def test_empty_batch(self) -> None:
        assert self.make_proposer().propose([], 4) == [], "propose([]) must return []"

    def test_deterministic(self) -> None:
        first = self.simulate(self.make_proposer(), seed=3, max_tokens=5)
        second = self.simulate(self.make_proposer(), seed=3, max_tokens=5)
        assert first == second, "two fresh proposers given the same calls proposed different drafts"

    def test_drafts_repetitive_text(self) -> None:
        if not self.expects_drafts:
            pytest.skip("expects_drafts is False")
        history = self.simulate(self.make_proposer(), seed=11, max_tokens=4)
        assert any(d is not None for step in history for d in step), (
            "no draft at all over a run of repetitive prompts; set expects_drafts = False if intended"
        )
