"""The suffix proposer: conformance kit, drafts checked against the histories they come from."""

from __future__ import annotations

from typing import Any, ClassVar

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pyagent_core.interfaces.proposer import DraftTree, ProposerRequest
from pyagent_core.testing.proposer import ProposerConformance
from pyagent_kernels.spec_decode import PRIOR_RATES, TokenIndex
from pyagent_spec_suffix.plugin import SPEC
from pyagent_spec_suffix.proposer import SuffixProposer


class TestSuffix(ProposerConformance):
    impl = SuffixProposer
    spec = SPEC


class TestSuffixChainsPython(TestSuffix):
    options: ClassVar[dict[str, Any]] = {"tree": False, "backend": "python", "min_match": 1}


def suffix(**options: Any) -> SuffixProposer:
    """A suffix proposer built as the kit builds it, ``options`` over the spec's defaults."""
    kit = TestSuffix()
    return SuffixProposer(kit.make_options(**options), kit.make_context())


def occurrences(text: list[int], context: list[int], m: int) -> list[int]:
    """End positions e < len(text) where text[e - m:e] equals the last m tokens of context."""
    return [e for e in range(m, len(text)) if text[e - m:e] == context[-m:]]


def check_grounded(draft: DraftTree, texts: list[list[int]], context: list[int], min_match: int) -> None:
    """Every root-to-node path follows some occurrence of a suffix of the context in one text."""
    for node in range(len(draft)):
        path = [draft.token_ids[i] for i in draft.path(node)]
        assert any(
            text[e:e + len(path)] == path
            for text in texts for m in range(min_match, len(context) + 1) for e in occurrences(text, context, m)
        ), f"draft path {path} does not continue any occurrence of the context's suffix"
        parent = draft.parents[node]
        assert draft.scores is not None and 0 < draft.scores[node] <= 1
        assert parent < 0 or draft.scores[parent] >= draft.scores[node], "a node outscores its parent"


@settings(max_examples=100, deadline=None)
@given(prompt=st.lists(st.integers(0, 3), min_size=1, max_size=50), output=st.lists(st.integers(0, 3), max_size=20),
       earlier=st.lists(st.integers(0, 3), max_size=30), k=st.integers(1, 8), tree=st.booleans(),
       backend=st.sampled_from(["c", "python"]))
def test_drafts_continue_the_context_in_its_sources(prompt: list[int], output: list[int], earlier: list[int],
                                                   k: int, tree: bool, backend: str) -> None:
    proposer = suffix(tree=tree, backend=backend, min_token_prob=0.0, spec_factor=4.0)
    proposer.propose([ProposerRequest("old", [0], earlier)], 1)
    proposer.on_finished("old")
    (draft,) = proposer.propose([ProposerRequest("r", prompt, output)], k)
    if draft is not None:
        assert len(draft) <= k and (tree or draft.is_chain())
        check_grounded(draft, [prompt + output, earlier], prompt + output, proposer.options["min_match"])


def test_c_and_python_give_the_same_drafts() -> None:
    prompt = [1, 2, 3, 4, 1, 2, 3, 5, 1, 2, 3, 4, 1, 2, 3]
    drafts = [suffix(backend=b).propose([ProposerRequest("r", prompt, [])], 6) for b in ("c", "python")]
    assert drafts[0] == drafts[1] and drafts[0][0] is not None


def test_tree_scores_branches_by_frequency_and_match_length() -> None:
    prompt = [7, 1, 4, 7, 1, 4, 7, 1, 5, 7, 1]
    (draft,) = suffix(max_hits=8, spec_factor=8.0).propose([ProposerRequest("r", prompt, [])], 4)
    assert draft is not None
    first = {draft.token_ids[i]: draft.scores[i] for i in draft.children()}  # type: ignore[index]
    rate = PRIOR_RATES[1]  # a match of 2 tokens ("7 1"): the prior of its bucket, nothing learned yet
    assert first == {4: pytest.approx(2 / 3 * rate), 5: pytest.approx(1 / 3 * rate)}


def test_draft_size_follows_match_length() -> None:
    prompt = [1, 2, 3, 4, 5, 6, 9, 9, 5, 6]
    (draft,) = suffix(spec_factor=1.0).propose([ProposerRequest("r", prompt, [])], 8)
    assert draft is not None and draft.token_ids == (9, 9)  # match length 2 -> at most 2 nodes


def test_global_store_drafts_from_earlier_outputs() -> None:
    proposer = suffix(spec_factor=1.0)  # a match of 2 tokens drafts at most 2
    proposer.propose([ProposerRequest("a", [0], [10, 11, 12, 13, 14])], 4)
    proposer.on_finished("a")
    (draft,) = proposer.propose([ProposerRequest("b", [5, 10, 11], [])], 4)
    assert draft is not None and draft.token_ids == (12, 13)


@pytest.mark.parametrize("backend", ["c", "python"])
def test_store_stays_within_its_budget_and_evicts_oldest(backend: str) -> None:
    proposer = suffix(global_max_tokens=10, backend=backend)
    for start in range(0, 40, 4):
        proposer.propose([ProposerRequest(f"r{start}", [99], [start, start + 1, start + 2])], 1)
        proposer.on_finished(f"r{start}")
        store = proposer.drafter.store
        assert isinstance(store, TokenIndex) and len(store) <= 10
    assert store.tokens()[-4:] == [36, 37, 38, -1] and 0 not in store.tokens()
    proposer.propose([ProposerRequest("long", [99], list(range(100, 130)))], 1)
    proposer.on_finished("long")
    assert store.tokens() == [*range(121, 130), -1] and len(proposer.drafter) == 0
