"""The pyagent processors one vLLM logits processor hosts, built from the registry. No vLLM import.

Which processors: :func:`pyagent_vllm.inventory.hosted_order`. The chain itself is the shared
sampler host's (:class:`pyagent_sampler_host.chain.Chain`, built without a selector: vLLM chooses
the token); this module feeds it vLLM's batch updates and logits.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch

from pyagent_core.errors import RequestError
from pyagent_core.interfaces.grammar import TokenizerInfo
from pyagent_core.registry import Registry
from pyagent_sampler_host.chain import Chain
from pyagent_vllm.batch import request_params, translate

UNBOUNDED_VOCAB = 2**31 - 1
"""The vocabulary of the chain that checks parameters where the model's is unknown (vLLM's front
end): every check but "token id inside the vocabulary" runs there."""

logger = logging.getLogger("pyagent_vllm")


class HostedChain:
    """pyagent logits processors in order, fed vLLM's batch updates and logits.

    Args:
        registry: where the processors are looked up.
        names: processor names in chain order.
        vocab_size: the model's vocabulary (the logits' width).
        eos_token_ids: the model's end-of-sequence ids.
        tokenizer_info: the model's tokenizer, for processors whose parameters hold text (DRY's
            string breakers); ``None``: they take token ids only.

    Raises:
        SelectionError: an unknown or unavailable processor, or a token selector.
    """

    def __init__(self, registry: Registry, names: Sequence[str], vocab_size: int, eos_token_ids: Sequence[int] = (),
                 tokenizer_info: Callable[[], TokenizerInfo] | None = None) -> None:
        self.chain = Chain(registry, vocab_size, tuple(names), eos_token_ids=eos_token_ids,
                           tokenizer_info=tokenizer_info, with_selector=False)
        self.names = tuple(self.chain.names)

    def check(self, params: Mapping[str, Any]) -> None:
        """Raise :class:`RequestError` (a ``ValueError``) when a hosted processor rejects ``params``:
        the processors' own per-request checks, with their messages naming the parameter. Parameters
        no hosted processor reads are vLLM's or the other hosted class's business, so they pass."""
        self.chain.check_values(params)

    def _checked(self, update: Any) -> dict[int, dict[str, Any]]:
        """Each added row's parameters, the pyagent ones dropped (with an error logged) where a
        processor rejects them here: a token id outside the vocabulary is the one check the front
        end cannot make, and one request must not stop the engine."""
        checked = {}
        for index, sampling_params, _prompt, _output in update.added:
            params = request_params(sampling_params)
            try:
                self.check(params)
            except RequestError as error:
                logger.error("pyagent processors %s skip a request: %s", ",".join(self.names), error)
                params = {key: params[key] for key in ("seed", "eos_token_ids")}
            checked[index] = params
        return checked

    def update_state(self, update: Any) -> None:
        """Apply vLLM's batch update (``None``: only new tokens) to every processor."""
        if not self.chain.processors:
            return
        self.chain.update_state(translate(update, None if update is None else self._checked(update)))

    def apply(self, logits: torch.Tensor) -> torch.Tensor:
        """Run the processors that would change some row on ``logits [rows, vocab]`` (float32, as
        vLLM's sampler gives them); returns the processed logits (in place where possible)."""
        active = self.chain.active()
        if not active:
            return logits
        work = logits if logits.device.type == "cpu" else logits.cpu()
        out = self.chain.process(work, active)
        if out.device != logits.device:
            return logits.copy_(out)
        return out
