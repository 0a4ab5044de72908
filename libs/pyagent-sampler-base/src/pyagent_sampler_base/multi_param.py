"""Base of processors driven by several per-request parameters, with optional per-row state.

:class:`~pyagent_sampler_base.row_param_processor.RowParamProcessor` covers processors with one
parameter; samplers such as DRY (multiplier, base, allowed length, window, breakers) or mirostat
(mode, tau, eta, and a running ``mu``) need several parameters and state that lives with the row.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, Protocol

import attrs
import torch

from pyagent_core.interfaces.sampler import AddedRequest, BatchUpdate, LogitsProcessor, SamplerContext
from pyagent_sampler_base.logits_checks import check_logits


class ParamCheck(Protocol):
    """A per-request parameter's name and the check that rejects bad values (see ``RequestParam``)."""

    @property
    def name(self) -> str:
        """The key in a request's ``params`` and in the sampler's options."""

    def validate(self, value: Any, where: str) -> None:
        """Raise ``ValueError`` naming ``where`` and the parameter unless ``value`` is ``None`` or valid."""


@attrs.define
class ParamRow:
    """The state of one row: its request and the resolved value of every parameter.

    Subclass it to keep more per-row state (a running estimate, a random generator...).
    """

    request: AddedRequest
    values: dict[str, Any]

    @property
    def params(self) -> Mapping[str, Any]:
        """The request's own parameters (what :meth:`Sampler.param` reads)."""
        return self.request.params

    def context(self, last_n: int | None = None) -> list[int]:
        """Prompt then generated tokens; only the last ``last_n`` of them when given."""
        tokens = [*self.request.prompt_token_ids, *self.request.output_token_ids]
        return tokens if last_n is None else tokens[max(0, len(tokens) - last_n):]


class MultiParamProcessor(LogitsProcessor):
    """A processor whose effect on a row is set by several parameters, batched across rows.

    A parameter's value comes from the request's ``params``, else the engine-level option of the
    same name, else :attr:`neutral`. Values are validated when a request is added (options when the
    processor is built); :meth:`is_active` says which rows the processor touches, and only those rows
    are passed to :meth:`process`; the others come out bit for bit unchanged.

    Attributes:
        request_params: the parameters, each with its check.
        neutral: the value of each parameter that neither the request nor the options set.
        label: the processor's name in messages (``"typical sampler"``).
    """

    request_params: ClassVar[Sequence[ParamCheck]]
    neutral: ClassVar[Mapping[str, Any]]
    label: ClassVar[str]

    def __init__(self, options: Mapping[str, Any], context: SamplerContext) -> None:
        super().__init__(options, context)
        where = f"option of the {self.label}"
        for param in self.request_params:
            param.validate(self.options.get(param.name), where)
        self.check_values(self.resolve({}), where)
        self._active: list[int] | None = None

    def resolve(self, params: Mapping[str, Any]) -> dict[str, Any]:
        """Each parameter's value: from ``params``, else the option, else :attr:`neutral`."""
        values = {}
        for param in self.request_params:
            value = params.get(param.name)
            if value is None:
                value = self.options.get(param.name)
            values[param.name] = self.neutral[param.name] if value is None else value
        return values

    def row_state(self, request: AddedRequest) -> ParamRow:
        """Validate the request's parameters, then build its row state with :meth:`make_row`."""
        where = request.where
        for param in self.request_params:
            param.validate(request.params.get(param.name), where)
        values = self.resolve(request.params)
        self.check_values(values, where)
        return self.make_row(request, values)

    def check_values(self, values: Mapping[str, Any], where: str) -> None:
        """Checks that involve several parameters; raise ``ValueError`` naming them (default: none)."""

    def make_row(self, request: AddedRequest, values: dict[str, Any]) -> ParamRow:
        """The state of a new row (override to keep more than the values)."""
        return ParamRow(request, values)

    def update_state(self, update: BatchUpdate | None) -> None:
        """Apply the batch changes and forget which rows are active when anything changed."""
        super().update_state(update)
        if update is not None:
            self._active = None

    def active_rows(self) -> list[int]:
        """The rows this processor changes, in row order."""
        if self._active is None:
            self._active = [r for r in range(len(self.rows)) if self.is_active(self.rows[r].values)]
        return self._active

    @abstractmethod
    def is_active(self, values: Mapping[str, Any]) -> bool:
        """True when a row with these parameter values is processed (False leaves it unchanged)."""

    def leaves_batch_unchanged(self) -> bool:
        """True when no row of the batch is active."""
        return not self.active_rows()

    def apply(self, logits: torch.Tensor) -> torch.Tensor:
        """Check the logits, then process the active rows (in place); the other rows stay as they are."""
        check_logits(logits, self.vocab_size, self.label, len(self.rows))
        active = self.active_rows()
        if not active:
            return logits
        if len(active) == logits.shape[0]:
            return logits.copy_(self.process(logits, active))
        index = torch.tensor(active, dtype=torch.long, device=logits.device)
        logits[index] = self.process(logits.index_select(0, index), active).to(logits.dtype)
        return logits

    @abstractmethod
    def process(self, logits: torch.Tensor, rows: list[int]) -> torch.Tensor:
        """Process ``logits`` (one row per entry of ``rows``, the batch rows they come from)."""
