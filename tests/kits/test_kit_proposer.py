"""Meta-tests of the proposer kit: the scaffold's n-gram lookup proposer passes it, broken variants fail it."""

from __future__ import annotations

import random

import attrs
import pytest

from pyagent_core.interfaces.proposer import DraftTree, Proposer, ProposerContext
from pyagent_core.testing.proposer import ProposerConformance
from pyagent_core.testing.scaffolded import import_template

reference = import_template("proposer")
NgramProposer = reference.impl.KitReference
SPEC = reference.plugin.SPEC
# The scaffold's own conformance test, run here on the n-gram proposer it scaffolds.
TestNgramProposer = reference.tests.TestKitReference


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


def _kit(impl: type[Proposer]) -> ProposerConformance:
    return type(f"{impl.__name__}Kit", (TestNgramProposer,), {"impl": impl})()


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


def test_proposer_keeps_options_and_context() -> None:
    context = ProposerContext(vocab_size=64, max_model_len=128)
    proposer = NgramProposer({"max_ngram": 2}, context)
    assert proposer.context is context and proposer.options == {"max_ngram": 2}
    assert (context.target, context.registry, context.attention) == (None, None, None)
    # the target model takes no part in equality: contexts are compared by their sizes only
    assert attrs.evolve(context, target=object()) == context
