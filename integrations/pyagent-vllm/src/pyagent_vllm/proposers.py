"""pyagent's prompt-lookup proposers as vLLM ``custom_class`` speculative proposers.

``speculative_config={"method": "custom_class", "model": "pyagent_vllm.proposers.NgramProposer",
"num_speculative_tokens": 4}``. vLLM calls ``propose(sampled_token_ids, num_tokens_no_spec,
token_ids_cpu)`` with the persistent batch's token rows and no request ids, and verifies every draft
against the target model itself (greedy: exact match; sampled: rejection sampling), so a proposer
changes how fast tokens come, never which: the use is lossless whatever it drafts.

Without request ids a row's history is recognised by its tokens: a row whose tokens still start
with what it held at the previous call continues its history (only the new tokens are indexed),
any other row starts a new one. ``suffix`` also keeps a store of finished outputs; here a history
goes into the store when its row passes to another request, prompt included (vLLM gives no prompt
length), and chains only (``tree=False``: vLLM verifies chains). vLLM reports no acceptance to a
custom proposer, so the drafts' scores keep their prior calibration; vLLM ignores scores anyway.

vLLM builds no custom logits processors when speculative decoding is on, so pyagent's samplers do
not run beside a proposer.
"""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from pyagent_core.interfaces.proposer import Proposer, ProposerContext, ProposerRequest
from pyagent_core.kinds import PROPOSER
from pyagent_core.registry import get_registry

if TYPE_CHECKING:
    from vllm.config import VllmConfig


class RowHistories:
    """Which request history each batch row continues, from the rows' tokens alone."""

    def __init__(self) -> None:
        self._held: dict[int, tuple[str, np.ndarray]] = {}
        self._ids = itertools.count()

    def request_id(self, row: int, tokens: np.ndarray) -> tuple[str, str | None]:
        """The history id for ``row`` now holding ``tokens``, and the id of a history the row left
        (``None`` when it continues its own)."""
        held = self._held.get(row)
        left = None
        if held is not None and (len(held[1]) > len(tokens) or not np.array_equal(tokens[:len(held[1])], held[1])):
            left, held = held[0], None
        request_id = held[0] if held is not None else f"row{row}-{next(self._ids)}"
        self._held[row] = (request_id, tokens.copy())
        return request_id, left


class _CustomClassProposer:
    """A pyagent proposer (:attr:`pyagent_name`, with :attr:`options`) behind vLLM's custom_class calls."""

    pyagent_name: ClassVar[str]
    options: ClassVar[dict[str, Any]] = {}

    def __init__(self, vllm_config: VllmConfig) -> None:
        spec = vllm_config.speculative_config
        assert spec is not None
        self.k = int(spec.num_speculative_tokens)
        self.max_model_len = int(vllm_config.model_config.max_model_len)
        registry = get_registry()
        selection = registry.select(PROPOSER, self.pyagent_name, {**self.options, "max_tokens": self.k})
        context = ProposerContext(vocab_size=vllm_config.model_config.get_vocab_size(),
                                  max_model_len=self.max_model_len)
        self.proposer: Proposer = registry.load(selection.backend)(selection.options, context)
        self.rows = RowHistories()

    def load_model(self, *args: Any, **kwargs: Any) -> None:
        """Nothing to load (vLLM's CPU runner calls this with the target model)."""

    def propose(self, sampled_token_ids: list[list[int]], num_tokens_no_spec: np.ndarray, token_ids_cpu: np.ndarray,
                slot_mappings: Any = None) -> list[list[int]]:
        """One chain per row (empty where the row is not decoding or nothing matched)."""
        drafts: list[list[int]] = [[] for _ in sampled_token_ids]
        rows, requests = [], []
        for row, sampled in enumerate(sampled_token_ids):
            length = int(num_tokens_no_spec[row])
            if not sampled or length >= self.max_model_len:
                continue
            tokens = token_ids_cpu[row, :length]
            request_id, left = self.rows.request_id(row, tokens)
            if left is not None:
                self.proposer.on_finished(left)
            rows.append(row)
            requests.append(ProposerRequest(request_id=request_id, prompt_token_ids=(),
                                            output_token_ids=tokens.tolist()))
        for row, draft in zip(rows, self.proposer.propose(requests, self.k), strict=True):
            if draft is not None:
                drafts[row] = list(draft.token_ids)
        return drafts


class NgramProposer(_CustomClassProposer):
    """pyagent's ``ngram`` proposer (prompt lookup over each request's own tokens)."""

    pyagent_name = "ngram"


class SuffixProposer(_CustomClassProposer):
    """pyagent's ``suffix`` proposer, drafting chains (see the module docstring for its store)."""

    pyagent_name = "suffix"
    options: ClassVar[dict[str, Any]] = {"tree": False}
