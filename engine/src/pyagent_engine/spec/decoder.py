"""Speculative decoding in the engine: drafting, the bookkeeping after verification, adaptive length.

Each step, before scheduling, :meth:`SpeculativeDecoder.propose` asks the selected proposer for a
draft (a chain or a tree of guessed next tokens) for every running request that is decoding, checks
it, trims it to what is worth verifying, and attaches it to the request (``request.draft``). The
scheduler gives such a request ``1 + len(draft)`` tokens: its last real token and the draft nodes.
The inputs stage (:mod:`pyagent_engine.stages.inputs`) places node ``i`` at position
``last + depth(i)`` (so its rotary embedding is the one it would have if accepted) and in the cache
slot of position ``last + 1 + i``, and a tree mask lets each node see only its ancestors. The
logits of the last real token and of every node come back.

Verification is the select stage itself (:mod:`pyagent_engine.stages.select`): the draft is walked
depth by depth with the same sampler chain as a step without speculation (exact match for greedy
rows, rejection sampling for sampled ones, lossless either way), and the logprobs of the emitted
tokens are recorded by the same stage as in any step (:mod:`pyagent_engine.stages.logprobs`).

After verification the commit stage keeps the accepted nodes through the KV manager, which moves
their keys and values to their final slots (only tree drafts need it), advances the request's
computed-token count by the accepted length, and gives blocks holding nothing but rejected draft
tokens back to the pool (:meth:`~pyagent_engine.kv.manager.KVCacheManager.commit`); then
:meth:`SpeculativeDecoder.verified` tells the proposer and the draft-length controller.

Adaptive length: :mod:`pyagent_engine.spec.controller`; the draft-tree helpers: :mod:`pyagent_engine.spec.tree`.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Sequence
from typing import Any

import attrs

from pyagent_core.errors import ConfigError
from pyagent_core.interfaces.proposer import DraftTree, Proposer, ProposerContext, ProposerRequest
from pyagent_core.kinds import PROPOSER
from pyagent_core.registry import Registry, Selection
from pyagent_core.types import AttentionSpec
from pyagent_engine.requests.request import Request
from pyagent_engine.spec.config import SpeculativeConfig
from pyagent_engine.spec.controller import DraftController
from pyagent_engine.spec.tree import tree_error


class DraftWarning(UserWarning):
    """A proposer returned something the engine cannot verify; the draft was dropped."""


@attrs.define
class SpecStats:
    """Counters over the engine's life (what ``pyagent generate`` and the benchmark report).

    Only what could reach the output counts: when a request ends inside a verified draft (an
    accepted end-of-sequence or stop token), the nodes past its last output token count neither as
    drafted nor as accepted, since they are thrown away.

    Attributes:
        num_drafts: drafts verified.
        num_draft_tokens: draft nodes verified.
        num_accepted_tokens: draft nodes accepted whose tokens reached the output.
        accepted_per_position: ``[i]``: drafts whose accepted length exceeded ``i``.
        num_dropped: drafts dropped as invalid (out-of-vocab ids, too many nodes, a tree from a
            chain proposer, an exception).
        proposer_time_s: time spent in ``propose`` (wall clock).
        num_proposer_calls: calls to ``propose``.
    """

    num_drafts: int = 0
    num_draft_tokens: int = 0
    num_accepted_tokens: int = 0
    accepted_per_position: list[int] = attrs.field(factory=list)
    num_dropped: int = 0
    proposer_time_s: float = 0.0
    num_proposer_calls: int = 0

    def record(self, drafted: int, accepted: int) -> None:
        """Count one verified draft of ``drafted`` nodes of which ``accepted`` were accepted."""
        self.num_drafts += 1
        self.num_draft_tokens += drafted
        self.num_accepted_tokens += accepted
        if len(self.accepted_per_position) < accepted:
            self.accepted_per_position.extend([0] * (accepted - len(self.accepted_per_position)))
        for i in range(accepted):
            self.accepted_per_position[i] += 1

    def as_dict(self) -> dict[str, Any]:
        """The counters plus derived figures: mean accepted length (accepted draft tokens per
        draft, plus the bonus / correction token each verification yields), acceptance rate and
        proposer microseconds per call."""
        drafts = self.num_drafts
        return {
            **attrs.asdict(self),
            "mean_accepted_length": 1 + self.num_accepted_tokens / drafts if drafts else None,
            "acceptance_rate": self.num_accepted_tokens / self.num_draft_tokens if self.num_draft_tokens else None,
            "proposer_us_per_call": (1e6 * self.proposer_time_s / self.num_proposer_calls
                                     if self.num_proposer_calls else None),
        }


class SpeculativeDecoder:
    """The selected proposer plus the engine's drafting, verification and bookkeeping.

    The proposer is built as every proposer is, ``cls(options, context)``, with a
    :class:`~pyagent_core.interfaces.proposer.ProposerContext` holding the vocabulary size and the
    context length, plus ``target``, ``registry`` and ``attention`` when its spec says ``needs_model``.

    Args:
        registry: where the proposer is selected (and, for a ``needs_model`` proposer, the registry
            it builds its own engine on).
        config: which proposer, its options and the draft length.
        vocab_size: the target model's vocabulary size (drafts with larger ids are dropped).
        max_model_len: the target model's context length in tokens.
        target: the engine's loaded target model, for proposers whose spec says ``needs_model``.
        attention: the engine's attention selection, for proposers whose spec says ``needs_model``.

    Raises:
        ConfigError: the proposer's spec says ``needs_model`` and no ``target`` was given.
    """

    def __init__(self, registry: Registry, config: SpeculativeConfig, vocab_size: int, max_model_len: int, *,
                 target: Any = None, attention: Selection[AttentionSpec] | None = None) -> None:
        self.config = config
        self.selection = registry.select(PROPOSER, config.proposer, config.options)
        spec = self.spec = self.selection.backend.spec
        context: ProposerContext[object] = ProposerContext(vocab_size=vocab_size, max_model_len=max_model_len)
        if spec.needs_model:
            if target is None:
                raise ConfigError(f"proposer {spec.name!r} drafts with a model and needs the target model, "
                                  "but none was given; pass target= (an Engine passes its own model)")
            context = attrs.evolve(context, target=target, registry=registry, attention=attention)
        self.proposer: Proposer = registry.load(self.selection.backend)(self.selection.options, context)
        self.vocab_size = vocab_size
        self.controller = DraftController(config.num_draft_tokens, adaptive=config.adaptive)
        self.stats = SpecStats()
        self._reported = SpecStats()
        self._committed: list[tuple[Request, tuple[int, ...], int, int]] = []

    @property
    def name(self) -> str:
        """The selected proposer's name."""
        return self.selection.backend.name

    # --- drafting ------------------------------------------------------------------------------

    def propose(self, running: Sequence[Request], context: int) -> None:
        """Attach a checked, trimmed draft to every decoding request of ``running`` (or ``None``)."""
        decoding = [r for r in running if r.num_tokens - r.num_computed_tokens == 1]
        for request in running:
            request.draft = None
        if not decoding:
            return
        threshold = self.controller.threshold(len(decoding))
        limits = {}
        for request in decoding:
            room = min(request.params.max_tokens - len(request.output_token_ids), context - request.num_tokens) - 1
            limits[request.request_id] = min(self.controller.budget(request.request_id, threshold), max(room, 0))
        asked = [r for r in decoding if limits[r.request_id] > 0]
        if not asked:
            return
        max_tokens = max(limits[r.request_id] for r in asked)
        views = [ProposerRequest(r.request_id, r.prompt_token_ids, r.output_token_ids) for r in asked]
        started = time.perf_counter()
        try:
            drafts = self.proposer.propose(views, max_tokens)
        except Exception as error:  # a failing proposer costs its drafts, never the requests
            warnings.warn(f"proposer {self.name!r} failed: {type(error).__name__}: {error}; no drafts this step",
                          DraftWarning, stacklevel=2)
            drafts = [None] * len(asked)
        finally:
            self.stats.proposer_time_s += time.perf_counter() - started
            self.stats.num_proposer_calls += 1
        if not isinstance(drafts, list) or len(drafts) != len(asked):
            self._drop(f"returned {type(drafts).__name__} of length {len(drafts) if isinstance(drafts, list) else '?'} "
                       f"for {len(asked)} requests")
            return
        checked = [(request, self._check(draft, max_tokens)) for request, draft in zip(asked, drafts, strict=True)]
        offered = [(request, draft) for request, draft in checked if draft is not None]
        planned = self.controller.plan([(r.request_id, d, limits[r.request_id]) for r, d in offered], len(decoding))
        for (request, _), draft in zip(offered, planned, strict=True):
            request.draft = draft

    def _drop(self, why: str) -> None:
        self.stats.num_dropped += 1
        warnings.warn(f"proposer {self.name!r} {why}; the draft was dropped", DraftWarning, stacklevel=3)

    def _check(self, draft: object, max_tokens: int) -> DraftTree | None:
        if draft is None:
            return None
        if not isinstance(draft, DraftTree):
            self._drop(f"returned a {type(draft).__name__} instead of a DraftTree or None")
        elif len(draft) > max_tokens:
            self._drop(f"returned {len(draft)} draft tokens when asked for at most {max_tokens}")
        elif (invalid := tree_error(draft)) is not None:
            self._drop(f"returned an invalid draft tree ({invalid})")
        elif not self.spec.tree and not draft.is_chain():
            self._drop("returned a tree but its spec says tree=False")
        elif any(t >= self.vocab_size for t in draft.token_ids):
            self._drop(f"returned token ids {[t for t in draft.token_ids if t >= self.vocab_size][:5]} "
                       f"outside the vocabulary [0, {self.vocab_size})")
        else:
            return draft
        return None

    # --- after verification ------------------------------------------------------------------

    def verified(self, request: Request, accepted: Sequence[int]) -> None:
        """After the KV manager kept the ``accepted`` nodes of ``request``'s draft (in depth order) and
        before the emitted tokens are appended: tell the proposer and the controller, and drop the
        draft (:attr:`stats` counts it at :meth:`step_stats`)."""
        draft = request.draft
        assert draft is not None
        self._committed.append((request, draft.node_depths(), len(accepted), len(request.output_token_ids)))
        self.controller.verified(request.request_id, len(accepted), draft.depth,
                                 None if draft.scores is None else sum(draft.scores))
        self.proposer.on_verified(request.request_id, len(accepted))
        request.draft = None

    def step_stats(self, chunks: Sequence[Any], sampled_rows: int, step_time: float) -> dict[str, Any]:
        """This step's drafting figures for the step-stats hook (the drafts committed this step are
        counted here, once the engine has appended their tokens); a pure decode step (every token
        computed is a sampled row: ``sampled_rows``) is timed for the controller's cost fit."""
        self._count_committed()
        tokens = sum(c.num_tokens for c in chunks)
        if tokens == sampled_rows:
            self.controller.observe_step(tokens, step_time)
        now, before = self.stats, self._reported
        self._reported = attrs.evolve(now, accepted_per_position=list(now.accepted_per_position))
        return {
            "num_drafts": now.num_drafts - before.num_drafts,
            "num_draft_tokens": now.num_draft_tokens - before.num_draft_tokens,
            "num_accepted_tokens": now.num_accepted_tokens - before.num_accepted_tokens,
            "proposer_time_s": now.proposer_time_s - before.proposer_time_s,
        }

    def _count_committed(self) -> None:
        """Add this step's committed drafts to :attr:`stats`, now that the engine has appended what
        each request emits: a request that finished in the step kept only its first ``kept`` emitted
        tokens, so draft nodes deeper than ``kept`` count neither as drafted nor as accepted."""
        for request, depths, accepted, start in self._committed:
            kept = len(request.output_token_ids) - start
            end = kept if request.finished else len(depths)
            self.stats.record(sum(1 for depth in depths if depth <= end), min(accepted, end))
        self._committed.clear()

    def finished(self, request: Request) -> None:
        """The request left the engine: drop its state here and in the proposer."""
        request.draft = None
        self.controller.forget(request.request_id)
        try:
            self.proposer.on_finished(request.request_id)
        except Exception as error:
            warnings.warn(f"proposer {self.name!r} failed in on_finished: {type(error).__name__}: {error}",
                          DraftWarning, stacklevel=2)
