"""Meta-tests of the proposer kit: an n-gram lookup proposer passes it, broken variants fail it."""

from __future__ import annotations

import random
from collections.abc import Sequence

import attrs
import pytest

from pyagent_core.interfaces.proposer import DraftTree, Proposer, ProposerRequest
from pyagent_core.options import OptionSpec
from pyagent_core.testing.proposer import ProposerConformance
from pyagent_core.types import ProposerSpec


class NgramProposer(Proposer):
    """Finds the latest earlier occurrence of the context's last n tokens and drafts what followed."""

    def propose(self, requests: Sequence[ProposerRequest], max_tokens: int) -> list[DraftTree | None]:
        return [self.draft(r.all_token_ids(), max_tokens) for r in requests]

    def draft(self, tokens: list[int], max_tokens: int) -> DraftTree | None:
        """A chain continuing ``tokens``, or ``None`` when no n-gram repeats."""
        if max_tokens <= 0:
            return None
        for n in range(min(self.options["max_ngram"], len(tokens) - 1), 0, -1):
            tail = tokens[-n:]
            for start in range(len(tokens) - n - 1, -1, -1):
                if tokens[start:start + n] == tail:
                    return DraftTree.chain(tokens[start + n:start + n + max_tokens])
        return None


class OverlongProposer(NgramProposer):
    """Broken: drafts up to eight tokens whatever ``max_tokens`` says."""

    def draft(self, tokens: list[int], max_tokens: int) -> DraftTree | None:
        return super().draft(tokens, 8)


class ForkingProposer(NgramProposer):
    """Broken: adds a sibling branch, although its spec says it proposes chains only."""

    def draft(self, tokens: list[int], max_tokens: int) -> DraftTree | None:
        chain = super().draft(tokens, max_tokens - 1)
        if chain is None:
            return None
        return DraftTree([*chain.token_ids, tokens[-1]], [*chain.parents, -1])


class UnseededProposer(NgramProposer):
    """Broken: drafts tokens picked from the context with the global, unseeded random generator."""

    def draft(self, tokens: list[int], max_tokens: int) -> DraftTree | None:
        if max_tokens <= 0:
            return None
        return DraftTree.chain([random.choice(tokens) for _ in range(max_tokens)])


SPEC = ProposerSpec(
    name="ngram-test",
    impl=f"{__name__}:NgramProposer",
    summary="test-local n-gram lookup",
    options={"max_ngram": OptionSpec(type=int, default=3, min=1)},
)


class TestNgramProposer(ProposerConformance):
    impl = NgramProposer
    spec = SPEC


def _kit(impl: type[Proposer]) -> ProposerConformance:
    kit_class = type(f"{impl.__name__}Kit", (ProposerConformance,), {"impl": impl, "spec": SPEC})
    return kit_class()


@pytest.mark.parametrize(
    ("impl", "check"),
    [
        (OverlongProposer, "test_drafts_are_valid"),
        (ForkingProposer, "test_drafts_are_valid"),
        (UnseededProposer, "test_deterministic"),
    ],
)
def test_kit_catches_broken_proposer(impl: type[Proposer], check: str) -> None:
    with pytest.raises(AssertionError):
        getattr(_kit(impl), check)()


def test_forking_drafts_pass_when_the_spec_allows_trees() -> None:
    tree_spec = attrs.evolve(SPEC, name="fork-test", impl=f"{__name__}:ForkingProposer", tree=True)
    kit_class = type("TreeKit", (ProposerConformance,), {"impl": ForkingProposer, "spec": tree_spec})
    kit_class().test_drafts_are_valid()
