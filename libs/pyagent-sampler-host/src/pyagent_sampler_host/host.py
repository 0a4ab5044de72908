"""The sampler host of a runtime that hands it the requests to sample each step (the reference engine).

:class:`SamplerHost` keeps a :class:`~pyagent_sampler_host.chain.Chain` and the stable rows of its
batch: each step it is given the requests to sample and their logits (``logits[i]`` is
``requests[i]``'s row, in any order), rearranges them to the rows the samplers know, runs the
processors and chooses a token per request. Token selection follows the sampler contract (see
``pyagent_core.interfaces.sampler.TokenSelector``): a greedy request (temperature 0) gets the argmax
of its processed logits, the lowest token id among equal maxima; the other rows get the chain's
selector's tokens; a batch of greedy requests only never calls the selector.

Its API, for the engine's step (and any host built the same way):

- ``SamplerHost(registry, vocab_size, order, options, eos_token_ids, tokenizer_info, describe=...)``
- :meth:`~SamplerHost.check_params` when a request is submitted;
- :meth:`~SamplerHost.sample` and :meth:`~SamplerHost.sample_processed` per step (several rows per
  request are passed as several calls, or as :meth:`~SamplerHost.greedy_rows` at once);
- :attr:`~SamplerHost.names`, :attr:`~SamplerHost.skipped` for reports.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any, Generic, TypeVar

import torch

from pyagent_core.interfaces.grammar import TokenizerInfo
from pyagent_core.interfaces.sampler import LogitsProcessor, TokenSelector
from pyagent_core.registry import Registry
from pyagent_sampler_base.logits_checks import check_logits, check_selectable
from pyagent_sampler_host.chain import Chain
from pyagent_sampler_host.rows import RowRequest, StableRows

R = TypeVar("R")

GREEDY_OWNER = "greedy selection"


@functools.cache
def _greedy_kernel() -> Callable[[torch.Tensor], torch.Tensor] | None:
    """``pyagent_kernels.greedy.greedy_select`` on its C kernel when the compiled kernels are
    importable, else None."""
    try:
        import pyagent_kernels
        from pyagent_kernels.greedy import greedy_select
    except ImportError:
        return None
    return functools.partial(greedy_select, backend="c") if pyagent_kernels.status()["compiled"] else None


def greedy_tokens(logits: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """The ``int64`` argmax of every row, the lowest token id among equal maxima (the C kernel of
    ``pyagent_kernels.greedy`` for contiguous float32 rows when it is built, else ``torch.max``, which
    returns the first maximal index too); raises ``ValueError`` for a row without a finite logit."""
    check_logits(logits, vocab_size, GREEDY_OWNER)
    kernel = _greedy_kernel()
    if kernel is not None and logits.dtype == torch.float32 and logits.is_contiguous():
        with contextlib.suppress(ValueError):  # a row it cannot choose in: worded below
            return kernel(logits)
    row_max, token_ids = logits.max(dim=1)
    check_selectable(row_max, GREEDY_OWNER)
    return token_ids


class SamplerHost(Generic[R]):
    """A chain with a token selector and the stable rows of its batch, for requests of type ``R``.

    Args:
        registry, vocab_size, order, options, eos_token_ids, tokenizer_info, prefer: as for
            :class:`~pyagent_sampler_host.chain.Chain` (the chain always has a selector).
        describe: what the samplers see of a request (its parameters, prompt and live output list);
            called when the request is checked and when it joins the batch.

    Raises what :class:`~pyagent_sampler_host.chain.Chain` raises.
    """

    def __init__(self, registry: Registry, vocab_size: int, order: str | Sequence[str] | None = None,
                 options: Mapping[str, Mapping[str, Any]] | None = None, eos_token_ids: Sequence[int] = (),
                 tokenizer_info: Callable[[], TokenizerInfo] | None = None, *,
                 describe: Callable[[R], RowRequest], prefer: Collection[str] = ()) -> None:
        self.chain = Chain(registry, vocab_size, order, options, eos_token_ids, tokenizer_info, prefer=prefer)
        selector = self.chain.selector
        assert selector is not None  # a Chain built with_selector has one
        self.selector: TokenSelector = selector
        self.describe = describe
        self.rows: StableRows[R] = StableRows(describe)

    @property
    def names(self) -> list[str]:
        """Names of the samplers in chain order (processors, then the selector)."""
        return self.chain.names

    @property
    def skipped(self) -> tuple[str, ...]:
        """Staged processors the default chain left out: their requirements are not met here."""
        return self.chain.skipped

    @property
    def processors(self) -> list[LogitsProcessor]:
        """The logits processors, in chain order."""
        return self.chain.processors

    def check_params(self, request: R) -> None:
        """Raise :class:`~pyagent_core.errors.RequestError` when the chain cannot serve ``request``'s
        parameters (see :meth:`Chain.check_params <pyagent_sampler_host.chain.Chain.check_params>`)."""
        seen = self.describe(request)
        self.chain.check_params(seen.params, seen.prompt_token_ids)

    def _sync(self, requests: Sequence[R]) -> None:
        """Make the rows hold ``requests`` and tell every sampler what changed."""
        self.chain.update_state(self.rows.update(requests))

    def greedy_rows(self, requests: Sequence[R], logits: torch.Tensor, whole: bool = False) -> list[int] | None:
        """The greedy token of every row of ``logits`` when sampling ``requests`` is a plain argmax
        (every request greedy, and no processor would change a row: see ``leaves_batch_unchanged``;
        with ``whole``, no processor of the whole chain, as :meth:`sample_processed` runs it), else None.

        That holds until the batch changes, whatever the requests generate, so ``logits`` may hold
        any number of rows per request (speculative verification chooses every draft position at once).
        """
        self._sync(requests)
        if not all(self.rows.greedy) or self.chain.active(True, whole):
            return None
        tokens: list[int] = greedy_tokens(logits.float(), self.chain.context.vocab_size).tolist()
        return tokens

    def sample(self, requests: Sequence[R], logits: torch.Tensor) -> list[int]:
        """Choose one token per request; ``logits[i]`` belongs to ``requests[i]``.

        Rows are rearranged to the stable row order the samplers know, processed and selected.
        Processors that leave the whole batch unchanged are skipped; for an all-greedy batch in that
        order already with no processor left, the argmax reads ``logits`` itself.
        """
        return self._sample(requests, logits, False)[0]

    def sample_processed(self, requests: Sequence[R], logits: torch.Tensor) -> tuple[list[int], torch.Tensor]:
        """:meth:`sample`, also returning the processed logits the tokens were chosen from
        (``[i]``: ``requests[i]``'s row).

        The whole chain runs, also for an all-greedy batch (whose tokens it cannot change: the
        processors past the greedy prefix keep the argmax), so a request's processed logits do not
        depend on what else is in the batch.
        """
        tokens, processed = self._sample(requests, logits, True)
        assert processed is not None
        return tokens, processed

    def _sample(self, requests: Sequence[R], logits: torch.Tensor,
                keep: bool) -> tuple[list[int], torch.Tensor | None]:
        self._sync(requests)
        position = {id(r): i for i, r in enumerate(requests)}
        order = [position[id(r)] for r in self.rows.rows]
        greedy = self.rows.greedy
        all_greedy = all(greedy)
        processors = self.chain.active(all_greedy, keep)
        in_order = all_greedy and not processors and order == list(range(len(order)))
        batch = (logits if in_order else logits.index_select(0, torch.tensor(order))).float()
        batch = self.chain.process(batch, processors)
        processed = None
        if keep:  # before selection, in request order
            row_of = {id(r): i for i, r in enumerate(self.rows.rows)}
            processed = batch.index_select(0, torch.tensor([row_of[id(r)] for r in requests]))
        argmax = greedy_tokens(batch, self.chain.context.vocab_size)
        chosen = argmax if all_greedy else torch.where(torch.tensor(greedy), argmax, self.selector.select(batch))
        tokens = chosen.tolist()
        by_request = {id(r): tokens[i] for i, r in enumerate(self.rows.rows)}
        return [by_request[id(r)] for r in requests], processed
