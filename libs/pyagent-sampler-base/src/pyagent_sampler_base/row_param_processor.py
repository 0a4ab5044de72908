"""Base of the processors driven by one per-request parameter (temperature, top_k, top_p)."""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Mapping
from typing import Any, ClassVar

import torch

from pyagent_core.interfaces.sampler import AddedRequest, BatchUpdate, LogitsProcessor, SamplerContext
from pyagent_sampler_base.logits_checks import check_logits
from pyagent_sampler_base.request_params import RequestParam


class RowParamProcessor(LogitsProcessor):
    """A processor whose effect on a row is set by one parameter, batched across rows.

    A request's value comes from its ``params``, else from the engine-level option of the same
    name, else ``neutral`` (the value that leaves a row unchanged). Values are validated when a
    request is added (and options when the processor is built), and the per-row list is rebuilt
    only when the batch changes.
    """

    request_param: ClassVar[RequestParam]
    neutral: ClassVar[Any]

    def __init__(self, options: Mapping[str, Any], context: SamplerContext) -> None:
        super().__init__(options, context)
        name = self.request_param.name
        self.request_param.validate(self.options.get(name), f"option of the {name} sampler")
        self._values: list[Any] | None = None
        self._neutral: bool | None = None

    def row_state(self, request: AddedRequest) -> AddedRequest:
        """Validate the request's parameter, then keep the request itself as the row's state."""
        name = self.request_param.name
        self.request_param.validate(request.params.get(name), request.where)
        return request

    def update_state(self, update: BatchUpdate | None) -> None:
        """Apply the batch changes and forget the per-row values when anything changed."""
        super().update_state(update)
        if update is not None:
            self._values = self._neutral = None

    def row_values(self) -> list[Any]:
        """The parameter's value for every row of the batch, in row order."""
        if self._values is None:
            name = self.request_param.name
            self._values = [self.param(row, name, self.neutral) for row in range(len(self.rows))]
        return self._values

    def leaves_batch_unchanged(self) -> bool:
        """True when every row's value is neutral (remembered until the batch changes)."""
        if self._neutral is None:
            self._neutral = all(self.is_neutral(value) for value in self.row_values())
        return self._neutral

    def apply(self, logits: torch.Tensor) -> torch.Tensor:
        """Check the logits, then process the rows whose value is not ``neutral`` (in place)."""
        check_logits(logits, self.vocab_size, f"{self.request_param.name} sampler", len(self.rows))
        if self.leaves_batch_unchanged():
            return logits
        return self.process(logits, self.row_values())

    def is_neutral(self, value: Any) -> bool:
        """True when ``value`` leaves a row unchanged (default: it equals ``neutral``)."""
        return bool(value == self.neutral)

    @abstractmethod
    def process(self, logits: torch.Tensor, values: list[Any]) -> torch.Tensor:
        """Process ``logits`` given each row's value; rows with a neutral value must stay unchanged."""
