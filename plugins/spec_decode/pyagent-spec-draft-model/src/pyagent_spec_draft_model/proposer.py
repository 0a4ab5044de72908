"""The draft-model proposer: a second pyagent engine drafting greedily for the target.

Each :meth:`DraftModelProposer.propose` submits every request's context (prompt and output so far)
to the draft engine as a new greedy request of ``max_tokens`` tokens and runs the engine until they
finish. The draft engine caches prefixes, so the context's full blocks come from its cache and only
the last, partial block is recomputed: no per-request state has to be rolled back when the target
rejects part of a draft.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pyagent_core.errors import BackendUnavailableError, ConfigError, RequestError
from pyagent_core.interfaces.proposer import DraftTree, Proposer, ProposerContext, ProposerRequest
from pyagent_core.registry import Registry, Selection
from pyagent_core.types import AttentionSpec
from pyagent_engine.core.config import EngineConfig
from pyagent_engine.core.engine import Engine
from pyagent_engine.models.loader import LoadedModel, load_model
from pyagent_engine.requests.params import SamplingParams


def _draft_engine(draft: LoadedModel, registry: Registry, attention: Selection[AttentionSpec] | None,
                  config: EngineConfig) -> Engine:
    """An engine for ``draft`` on ``registry``, with the target's ``attention`` backend and options
    when that backend serves the draft model, else with the registry's choice."""
    if attention is not None:
        try:
            return Engine(draft, registry=registry, config=config, attention=attention.backend.qualified_name,
                          attention_options=attention.options)
        except BackendUnavailableError:  # the target's backend does not serve the draft's dtype or head size
            pass
    return Engine(draft, registry=registry, config=config)


def tokenizer_mismatch(target: LoadedModel, draft: LoadedModel) -> str | None:
    """Why ``draft`` cannot draft for ``target`` (a different vocabulary), or ``None``."""
    size, draft_size = target.tokenizer.vocab_size, draft.tokenizer.vocab_size
    if size != draft_size:
        return f"the draft model's vocabulary has {draft_size} tokens, the target's {size}"
    for token_id in range(size):
        text, draft_text = target.tokenizer.id_to_token(token_id), draft.tokenizer.id_to_token(token_id)
        if text != draft_text:
            return f"token {token_id} is {text!r} for the target but {draft_text!r} for the draft model"
    return None


class DraftModelProposer(Proposer):
    """Drafts the next tokens of each request with a smaller model of the same tokenizer.

    Its spec says ``needs_model``: the context holds the target model, the registry the target
    engine selected its backends from and the target's attention selection. The draft engine is built
    on that registry, and attends with the target's backend and options unless that backend cannot
    serve the draft model (another dtype or head size), where the registry chooses as it would for
    any engine.

    Args:
        options: ``model``, ``dtype`` (unset: the target's, so a model drafting for itself computes
            what the target computes), ``max_tokens``, ``kv_cache_gib`` (see the plugin's spec).
        context: the target's vocabulary and context, its model, registry and attention selection.

    Raises:
        ConfigError: the context lacks the target model or the registry, or the draft model's
            tokenizer is not the target's.
    """

    def __init__(self, options: Mapping[str, Any], context: ProposerContext[LoadedModel]) -> None:
        super().__init__(options, context)
        target, registry = context.target, context.registry
        if target is None or registry is None:
            missing = " and ".join(n for n, v in (("target model", target), ("registry", registry)) if v is None)
            raise ConfigError(f"draft-model needs the {missing} in its ProposerContext; its spec says needs_model, "
                              "so build it through an engine (SpeculativeConfig(proposer='draft-model'))")
        draft = load_model(self.options["model"] or None, self.options["dtype"] or target.dtype)
        problem = tokenizer_mismatch(target, draft)
        if problem is not None:
            raise ConfigError(f"draft-model cannot draft for this model: {problem}; choose a draft model "
                              "trained with the target's tokenizer")
        self.engine = _draft_engine(draft, registry, context.attention,
                                    EngineConfig(kv_cache_gib=float(self.options["kv_cache_gib"]),
                                                 prefix_caching=True))

    def propose(self, requests: Sequence[ProposerRequest], max_tokens: int) -> list[DraftTree | None]:
        """A greedy chain of up to ``min(max_tokens, options["max_tokens"])`` tokens per request."""
        count = min(max_tokens, int(self.options["max_tokens"]))
        if count <= 0:
            return [None] * len(requests)
        params = SamplingParams(max_tokens=count, temperature=0.0, ignore_eos=True)
        submitted = []
        for request in requests:
            try:
                submitted.append(self.engine.add_request(request.all_token_ids(), params))
            except RequestError:  # context too long for the draft engine: no guess for this request
                submitted.append(None)
        while self.engine.has_unfinished():
            self.engine.step()
        return [None if r is None or r.error is not None or not r.output_token_ids
                else DraftTree.chain(r.output_token_ids) for r in submitted]
