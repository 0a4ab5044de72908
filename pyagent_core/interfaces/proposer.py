"""Speculative-decoding proposer interface: cheap drafts that the target model verifies.

Each step the engine calls :meth:`Proposer.propose` with a view of every running request and gets
back one draft (or ``None``) per request. The engine verifies drafts against the target model
(greedy exact match or rejection sampling, shared by every proposer), appends the accepted draft
tokens plus one token of its own to the request's output, then reports the outcome with
:meth:`Proposer.on_verified`. :meth:`Proposer.on_finished` drops a request's state.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import attrs

from pyagent_core.options import OptionSpec

if TYPE_CHECKING:
    from pyagent_core.registry import Registry, Selection
    from pyagent_core.types import AttentionSpec

TargetT = TypeVar("TargetT", covariant=True)
"""The host's loaded target model, as :attr:`ProposerContext.target` holds it."""

ROOT = -1
"""Parent index of draft nodes that directly follow the request's last token."""

KERNEL_BACKEND_OPTION = OptionSpec(type=str, default="auto", choices=("auto", "c", "python"),
                                   help="matching implementation: C kernel, Python fallback, or auto")
"""The ``backend`` option of proposers that draft with pyagent-kernels (``ngram``, ``suffix``)."""


def _ints(values: Iterable[int]) -> tuple[int, ...]:
    return tuple(int(v) for v in values)


def _to_scores(value: Sequence[float] | None) -> tuple[float, ...] | None:
    return None if value is None else tuple(float(s) for s in value)


@attrs.frozen
class DraftTree:
    """A draft: token nodes in topological order, each pointing at its parent.

    ``parents[i]`` is the index of node ``i``'s parent, smaller than ``i``, or :data:`ROOT` (-1)
    when node ``i`` follows the request's last token. A chain (one guess per position) is the tree
    with ``parents[i] == i - 1``. Siblings are alternative guesses for the same position.

    Attributes:
        token_ids: the drafted token of each node; at least one node.
        parents: the parent of each node, as above.
        scores: optional per-node scores, higher meaning more likely (e.g. draft log-probabilities).

    Raises:
        ValueError: when the lengths differ, a parent index is out of range, or a token is negative.
    """

    token_ids: tuple[int, ...] = attrs.field(converter=_ints)
    parents: tuple[int, ...] = attrs.field(converter=_ints)
    scores: tuple[float, ...] | None = attrs.field(default=None, converter=_to_scores)

    def __attrs_post_init__(self) -> None:
        self.check()

    def check(self) -> None:
        """Raise ``ValueError`` unless the fields form a draft tree (the constructor's checks; the
        engine runs them on :meth:`trusted` drafts too)."""
        n = len(self.token_ids)
        if n == 0:
            raise ValueError("a draft tree needs at least one node; return None for no draft")
        if len(self.parents) != n or (self.scores is not None and len(self.scores) != n):
            raise ValueError(
                f"draft tree has {n} tokens, {len(self.parents)} parents and "
                f"{'no' if self.scores is None else len(self.scores)} scores; give one of each per node"
            )
        for i, parent in enumerate(self.parents):
            if not ROOT <= parent < i:
                raise ValueError(f"parent of draft node {i} is {parent}; it must be -1 (root) or in [0, {i})")
        negative = [t for t in self.token_ids if t < 0]
        if negative:
            raise ValueError(f"draft token ids must be non-negative, got {negative}")

    @classmethod
    def trusted(cls, token_ids: tuple[int, ...], parents: tuple[int, ...],
                scores: tuple[float, ...] | None = None) -> DraftTree:
        """The draft tree of already valid fields, taken as they are: no conversion, no checks.

        For proposers whose drafting guarantees what the constructor checks (tuples of equal
        lengths, at least one node, ``ROOT <= parents[i] < i``, non-negative token ids) and that
        build a draft every step, where the conversions would cost more than the drafting. The
        engine still runs :meth:`check` and its own size, shape and vocabulary checks on each
        draft. Anything else: call the class.
        """
        tree = _new(cls)
        _set_token_ids(tree, token_ids)
        _set_parents(tree, parents)
        _set_scores(tree, scores)
        return tree

    @classmethod
    def chain(cls, token_ids: Sequence[int], scores: Sequence[float] | None = None) -> DraftTree:
        """The linear draft ``token_ids[0] -> token_ids[1] -> ...``."""
        return cls(token_ids, range(ROOT, len(token_ids) - 1), scores)

    def __len__(self) -> int:
        return len(self.token_ids)

    def is_chain(self) -> bool:
        """True when every node's parent is the node before it."""
        return all(parent == i - 1 for i, parent in enumerate(self.parents))

    def node_depths(self) -> tuple[int, ...]:
        """Depth of every node: 1 for children of the root, parent's depth + 1 otherwise."""
        depths: list[int] = []
        for parent in self.parents:
            depths.append(1 if parent == ROOT else depths[parent] + 1)
        return tuple(depths)

    @property
    def depth(self) -> int:
        """Length of the longest root-to-leaf path: the most tokens a verification can accept."""
        return max(self.node_depths())

    def path(self, node: int) -> tuple[int, ...]:
        """Node indices from the root's child down to ``node`` (inclusive)."""
        if not 0 <= node < len(self):
            raise IndexError(f"draft node {node} out of range [0, {len(self)})")
        nodes = []
        while node != ROOT:
            nodes.append(node)
            node = self.parents[node]
        return tuple(reversed(nodes))

    def children(self, node: int = ROOT) -> tuple[int, ...]:
        """Indices of the nodes whose parent is ``node`` (default: the root)."""
        return tuple(i for i, parent in enumerate(self.parents) if parent == node)


# DraftTree.trusted: the slots' own setters, which a frozen class's __setattr__ does not guard
_new = object.__new__
_set_token_ids, _set_parents, _set_scores = (DraftTree.__dict__[name].__set__ for name in ("token_ids", "parents",
                                                                                           "scores"))


@attrs.frozen
class ProposerRequest:
    """Read-only view of a running request handed to :meth:`Proposer.propose`.

    The token sequences are the engine's own; a proposer must not modify them.
    """

    request_id: str
    prompt_token_ids: Sequence[int]
    output_token_ids: Sequence[int]

    def all_token_ids(self) -> list[int]:
        """Prompt followed by output: the context the next draft continues."""
        return [*self.prompt_token_ids, *self.output_token_ids]


@attrs.frozen(kw_only=True)
class ProposerContext(Generic[TargetT]):
    """What a proposer is built for: the target model's vocabulary and context, and for proposers
    whose spec says ``needs_model``, the target model itself and where the engine found its backends.

    Attributes:
        vocab_size: the target model's vocabulary size; drafted token ids must be below it.
        max_model_len: the target model's context length in tokens (prompt and output together).
        target: the engine's loaded target model, for proposers whose spec says ``needs_model``
            (``None`` for the others). Its type is the host's, the context's type parameter: the
            reference engine passes a ``ProposerContext[LoadedModel]`` (its
            ``pyagent_engine.models.loader.LoadedModel``: the model, its config, tokenizer and
            dtype), so a proposer that needs the target depends on that engine and annotates its
            context as such.
        registry: the :class:`~pyagent_core.registry.Registry` the engine selected its backends
            from, for ``needs_model`` proposers (``None`` for the others): a proposer that builds an
            engine of its own selects that engine's backends here, never from the global registry.
        attention: the target engine's attention selection (backend and options), for
            ``needs_model`` proposers (``None`` for the others): a proposer running a model of its
            own may attend with the same backend and options where that backend supports its model.

    ``target``, ``registry`` and ``attention`` take no part in equality (a model is not compared).
    """

    vocab_size: int
    max_model_len: int
    target: TargetT | None = attrs.field(default=None, eq=False)
    registry: Registry | None = attrs.field(default=None, eq=False)
    attention: Selection[AttentionSpec] | None = attrs.field(default=None, eq=False)


class Proposer(ABC):
    """Proposes draft continuations for a batch of requests.

    Constructed once per engine. Proposals must be deterministic: the same calls in the same order
    give the same drafts (seed any randomness from the options).

    Args:
        options: the proposer's validated options (defaults filled in).
        context: the target model's vocabulary and context (and for ``needs_model`` proposers the
            model itself), see :class:`ProposerContext`.
    """

    def __init__(self, options: Mapping[str, Any], context: ProposerContext[object]) -> None:
        self.options = dict(options)
        self.context = context

    @classmethod  # noqa: B027 - optional hook
    def check_available(cls) -> None:
        """Raise with a reason if this proposer cannot run here (deep check, ``--check``)."""

    @abstractmethod
    def propose(self, requests: Sequence[ProposerRequest], max_tokens: int) -> list[DraftTree | None]:
        """One draft per request, in order, or ``None`` where the proposer has no guess.

        Every draft has at most ``max_tokens`` nodes (so ``max_tokens == 0`` gives only ``None``)
        and must be a chain unless the proposer's spec says ``tree=True``. Token ids are below the
        model's vocabulary size.
        """

    def on_verified(self, request_id: str, accepted: int) -> None:  # noqa: B027 - optional hook
        """``accepted`` tokens of the request's last draft (0 up to its depth) matched the target.

        Called once per proposed draft, after the engine appended the accepted tokens and one more
        token to the request's output. Default: nothing.
        """

    def on_finished(self, request_id: str) -> None:  # noqa: B027 - optional hook
        """The request finished or was aborted; drop any state kept for it. Default: nothing."""
