"""DraftTree: the checked constructor refuses invalid drafts; the trusted one builds the same tree."""

from __future__ import annotations

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from pyagent_core.interfaces.proposer import ROOT, DraftTree


@st.composite
def trees(draw: st.DrawFn) -> tuple[list[int], list[int], list[float] | None]:
    """Valid fields: every parent is the root or an earlier node."""
    size = draw(st.integers(1, 12))
    parents = [draw(st.integers(ROOT, i - 1)) for i in range(size)]
    tokens = draw(st.lists(st.integers(0, 50_000), min_size=size, max_size=size))
    scores = draw(st.none() | st.lists(st.floats(0.0, 1.0), min_size=size, max_size=size))
    return tokens, parents, scores


@given(trees())
def test_trusted_equals_the_checked_constructor(fields: tuple[list[int], list[int], list[float] | None]) -> None:
    tokens, parents, scores = fields
    checked = DraftTree(tokens, parents, scores)
    trusted = DraftTree.trusted(tuple(tokens), tuple(parents), None if scores is None else tuple(scores))
    assert type(trusted) is DraftTree
    assert trusted == checked and hash(trusted) == hash(checked)
    assert trusted.node_depths() == checked.node_depths() and trusted.is_chain() == checked.is_chain()
    for node in range(len(tokens)):
        assert trusted.path(node) == checked.path(node)


def test_trusted_trees_are_frozen() -> None:
    tree = DraftTree.trusted((1, 2), (ROOT, 0), (0.5, 0.25))
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        tree.token_ids = (3,)  # type: ignore[misc]


def test_checked_constructor_converts_to_tuples() -> None:
    tree = DraftTree([1, 2, 3], range(ROOT, 2), [1, 0.5, 0.25])
    assert tree == DraftTree.chain((1, 2, 3), (1.0, 0.5, 0.25))
    assert tree.token_ids == (1, 2, 3) and tree.parents == (ROOT, 0, 1) and tree.scores == (1.0, 0.5, 0.25)


@pytest.mark.parametrize(("tokens", "parents", "scores", "message"), [
    ([], [], None, "at least one node"),
    ([1, 2], [ROOT], None, "2 tokens, 1 parents"),
    ([1, 2], [ROOT, 0], [0.5], "1 scores"),
    ([1, 2], [ROOT, 1], None, "parent of draft node 1 is 1"),
    ([1], [-2], None, "parent of draft node 0 is -2"),
    ([1, -3], [ROOT, 0], None, "non-negative"),
])
def test_checked_constructor_refuses_invalid_drafts(tokens: list[int], parents: list[int],
                                                    scores: list[float] | None, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        DraftTree(tokens, parents, scores)
