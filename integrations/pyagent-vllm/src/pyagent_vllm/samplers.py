"""pyagent's logits processors as vLLM (v1 model runner) logits processors.

Two classes, registered in the ``vllm.logits_processors`` entry-point group so that every vLLM
engine builds them: :class:`PyagentLogitsProcessors` hosts the processors that can change a greedy
token (constraints, DRY, XTC, typical...), which vLLM runs on the raw logits of every request, and
:class:`PyagentArgmaxInvariantProcessors` the others (epsilon, eta, top-n-sigma, dynatemp,
mirostat), which vLLM runs after its temperature for sampled requests. Which processors are hosted:
:func:`pyagent_vllm.inventory.hosted_order`. A request sets their parameters in ``extra_args``
(``vllm_xargs`` over HTTP) under the names ``pyagent generate`` uses; a request that sets none
leaves its row untouched, and a batch where no row sets any skips the processors.

``validate_params`` runs the processors' own checks when vLLM admits a request, so a bad value is
vLLM's validation error (HTTP 400 naming the parameter). The front end does not know the model's
vocabulary, so a token id past it is caught in the engine instead: that request then runs without
pyagent's processors and the error is logged.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

import torch
from vllm.v1.sample.logits_processor import BatchUpdate, LogitsProcessor

from pyagent_core.errors import RequestError
from pyagent_core.interfaces.grammar import TokenizerInfo
from pyagent_core.registry import get_registry
from pyagent_sampler_host.tokenizer_info import tokenizer_info_from_file
from pyagent_vllm.batch import request_params
from pyagent_vllm.chain import UNBOUNDED_VOCAB, HostedChain
from pyagent_vllm.inventory import hosted_order, split_by_invariance

if TYPE_CHECKING:
    from vllm import SamplingParams
    from vllm.config import VllmConfig


def _tokenizer_info(tokenizer: str, eos_token_ids: tuple[int, ...], vocab_size: int) -> TokenizerInfo:
    """The model's tokenizer from its ``tokenizer.json`` (a local folder), for DRY's string breakers."""
    path = Path(tokenizer) / "tokenizer.json"
    if not path.is_file():
        raise RequestError(f"the model's tokenizer {tokenizer!r} is not a local folder with tokenizer.json; "
                           "pass DRY's sequence breakers as token ids")
    return tokenizer_info_from_file(path, eos_token_ids, vocab_size)


def _eos_token_ids(vllm_config: VllmConfig) -> tuple[int, ...]:
    eos = getattr(vllm_config.model_config.hf_text_config, "eos_token_id", None)
    if eos is None:
        return ()
    return (eos,) if isinstance(eos, int) else tuple(eos)


class _HostedProcessors(LogitsProcessor):
    """The pyagent processors of one argmax invariance, as one vLLM logits processor."""

    argmax_invariant: ClassVar[bool]
    _checker: ClassVar[HostedChain | None] = None

    @classmethod
    def names(cls) -> tuple[str, ...]:
        """The hosted processors of this class, in chain order."""
        registry = get_registry()
        return split_by_invariance(registry, hosted_order(registry), cls.argmax_invariant)

    @classmethod
    def validate_params(cls, sampling_params: SamplingParams) -> None:
        """Raise ``ValueError`` naming the parameter when a hosted processor rejects the request's."""
        if not sampling_params.extra_args:
            return
        if cls.__dict__.get("_checker") is None:
            cls._checker = HostedChain(get_registry(), cls.names(), UNBOUNDED_VOCAB)
        checker = cls._checker
        assert checker is not None
        checker.check(request_params(sampling_params))

    def __init__(self, vllm_config: VllmConfig, device: torch.device, is_pin_memory: bool) -> None:
        model = vllm_config.model_config
        vocab, eos = model.get_vocab_size(), _eos_token_ids(vllm_config)
        cached: list[TokenizerInfo] = []

        def tokenizer_info() -> TokenizerInfo:
            if not cached:
                cached.append(_tokenizer_info(str(model.tokenizer), eos, vocab))
            return cached[0]

        self.chain = HostedChain(get_registry(), self.names(), vocab, eos, tokenizer_info)

    def is_argmax_invariant(self) -> bool:
        """The invariance of the processors this class hosts (fixed per class)."""
        return self.argmax_invariant

    def update_state(self, batch_update: BatchUpdate | None) -> None:
        """Pass vLLM's batch changes on to every hosted processor."""
        self.chain.update_state(batch_update)

    def apply(self, logits: torch.Tensor) -> torch.Tensor:
        """Run the hosted processors on the batch's logits."""
        return self.chain.apply(logits)


class PyagentLogitsProcessors(_HostedProcessors):
    """The hosted pyagent processors that may change a greedy token (run for every request)."""

    argmax_invariant = False


class PyagentArgmaxInvariantProcessors(_HostedProcessors):
    """The hosted pyagent processors that never change the argmax (run for sampled requests)."""

    argmax_invariant = True
