"""Use a pyagent sampler chain inside Hugging Face transformers' ``model.generate()``.

:class:`PyagentLogitsProcessor` is a ``transformers.LogitsProcessor``: give it processor names (an
order string like ``"penalties,top_k,top_p,min_p,temperature"``, as for ``pyagent generate
--samplers``) and the per-request parameters, and pass it in ``logits_processor=`` with
``do_sample=True`` (transformers then draws from the processed scores; leave its own ``top_k`` /
``top_p`` / ``temperature`` at their neutral values)::

    from transformers import LogitsProcessorList
    from pyagent_transformers.logits_processor import PyagentLogitsProcessor

    chain = PyagentLogitsProcessor("penalties,top_k,min_p,temperature",
                                   {"repetition_penalty": 1.2, "top_k": 40, "min_p": 0.05, "temperature": 0.7})
    model.generate(input_ids, do_sample=True, top_k=0, logits_processor=LogitsProcessorList([chain]))

Each row of ``input_ids`` is one pyagent request: the ids at the first call are its prompt, and every
later call's last column is its newest output token, so history-based processors (penalties, DRY,
no-repeat-ngram...) see exactly what they would in the engine. For a left-padded batch pass the
``attention_mask`` you give ``generate()``: a row's padding is then left out of its prompt, as
transformers' own repetition penalty leaves it out (without it, padding counts as prompt tokens).
When the rows do not continue the previous call's rows (a new ``generate()``, or beam search
reordering them), the state starts afresh from the current ids. The chain is the shared sampler
host's (:class:`pyagent_sampler_host.chain.Chain`, without a selector: transformers chooses the
token), so its checks are the engine's: a parameter no processor of the chain reads is an error
naming it. This module imports transformers only for the base class.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
from transformers import LogitsProcessor as HFLogitsProcessor

from pyagent_core.interfaces.sampler import AddedRequest, BatchUpdate
from pyagent_core.registry import Registry, get_registry
from pyagent_sampler_host.chain import Chain
from pyagent_sampler_host.order import ChainResolver, check_option_names


class PyagentLogitsProcessor(HFLogitsProcessor):
    """A chain of pyagent logits processors as one transformers ``LogitsProcessor``.

    Args:
        processors: processor names in chain order (a list, or a comma-separated order string).
        params: per-request parameters shared by every row (``{"top_k": 40, ...}``), or one mapping
            per row of the batch.
        options: engine-level options per processor name (``{"penalties": {"backend": "torch"}}``).
        registry: where processors are looked up (default: the installed plugins).
        attention_mask: the ``attention_mask`` of the batch given to ``generate()``: positions before a
            row's first non-zero are padding, left out of that row's prompt. Its rows are repeated to
            match ``input_ids`` when ``generate()`` expands the batch (``num_beams``,
            ``num_return_sequences``).

    Raises:
        pyagent_core.errors.SelectionError: an unknown or unavailable processor, or a token selector
            (when constructed).
        pyagent_core.errors.RequestError: invalid parameters, or one no processor of the chain reads (a
            ``ValueError``, at the first call of a generation, which adds the rows).
    """

    def __init__(self, processors: str | Sequence[str], params: Mapping[str, Any] | Sequence[Mapping[str, Any]] = (),
                 options: Mapping[str, Mapping[str, Any]] | None = None, registry: Registry | None = None,
                 attention_mask: torch.Tensor | None = None) -> None:
        self.registry = registry or get_registry()
        self.order = processors
        self.options = dict(options or {})
        plan = ChainResolver(self.registry).plan(processors, with_selector=False)  # bad names fail here
        check_option_names(self.options, plan)
        self.names = plan.names
        self.params = params
        self.attention_mask = None if attention_mask is None else attention_mask.detach().cpu()
        self._chain: Chain | None = None
        self._outputs: list[list[int]] = []
        self._ids: torch.Tensor | None = None

    def _row_params(self, rows: int) -> list[Mapping[str, Any]]:
        if isinstance(self.params, Mapping):
            return [self.params] * rows
        if len(self.params) != rows:
            raise ValueError(f"params has {len(self.params)} entries but input_ids has {rows} rows; "
                             "pass one mapping per row, or a single mapping for every row")
        return list(self.params)

    def _prompt_starts(self, rows: int) -> list[int]:
        """Where each row's prompt starts: after its left padding, per the attention mask."""
        if self.attention_mask is None:
            return [0] * rows
        mask_rows = int(self.attention_mask.shape[0])
        if rows % mask_rows:
            raise ValueError(f"attention_mask has {mask_rows} rows but input_ids has {rows}; pass the mask "
                             "given to generate()")
        mask = self.attention_mask.repeat_interleave(rows // mask_rows, dim=0)
        starts: list[int] = (mask != 0).int().argmax(dim=1).tolist()
        return starts

    def _start(self, input_ids: torch.Tensor, vocab: int) -> Chain:
        """Build the chain (once per vocabulary size) and add every row as a new request."""
        chain = self._chain
        if chain is None or chain.context.vocab_size != vocab:
            chain = self._chain = Chain(self.registry, vocab, self.order, self.options, with_selector=False)
        else:
            chain.update_state(BatchUpdate(0, removed=tuple(range(len(self._outputs)))))
        rows = int(input_ids.shape[0])
        row_params = self._row_params(rows)
        starts = self._prompt_starts(rows)
        prompts = [input_ids[r, starts[r]:].tolist() for r in range(rows)]
        for params, prompt in zip(row_params, prompts, strict=True):
            chain.check_params(params, prompt)
        self._outputs = [[] for _ in range(rows)]
        added = tuple(AddedRequest(r, dict(p), prompts[r], self._outputs[r]) for r, p in enumerate(row_params))
        chain.update_state(BatchUpdate(rows, added=added))
        return chain

    def _continues(self, input_ids: torch.Tensor) -> bool:
        """Whether ``input_ids`` is the previous call's ids plus one column."""
        previous = self._ids
        return (previous is not None and input_ids.shape[0] == previous.shape[0]
                and input_ids.shape[1] == previous.shape[1] + 1
                and torch.equal(input_ids[:, :-1], previous))

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        """Process ``scores [batch, vocab]`` given the ids so far; returns the processed scores."""
        ids = input_ids.detach().cpu()
        chain = self._chain
        if chain is not None and self._continues(ids):
            for outputs, token in zip(self._outputs, ids[:, -1].tolist(), strict=True):
                outputs.append(token)
            chain.update_state(None)
        else:
            chain = self._start(ids, int(scores.shape[-1]))
        self._ids = ids
        work = scores.detach().to("cpu", torch.float32).contiguous()
        processed = chain.process(work)
        return processed.to(scores.device, scores.dtype)  # type: ignore[return-value]
