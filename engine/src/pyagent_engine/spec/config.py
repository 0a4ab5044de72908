"""Speculative decoding settings of an engine."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from pyagent_core.errors import ConfigError


def _positive_draft_length(_instance: object, _attribute: object, value: object) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise ConfigError(f"num_draft_tokens must be a positive integer, got {value!r}; "
                           "leave speculative decoding off to draft nothing")


@attrs.frozen(kw_only=True)
class SpeculativeConfig:
    """Speculative decoding settings of an engine.

    Attributes:
        proposer: the proposer's name (``--speculative``).
        options: its options (``--spec-opt KEY=VALUE``).
        num_draft_tokens: the most draft nodes per request and step (``--num-draft-tokens``, > 0).
        adaptive: trim drafts to what is expected to pay off (see
            :class:`~pyagent_engine.spec.controller.DraftController`).
    """

    proposer: str
    options: Mapping[str, Any] = attrs.field(factory=dict)
    num_draft_tokens: int = attrs.field(default=8, validator=_positive_draft_length)
    adaptive: bool = True
