"""Logprob flags of ``pyagent generate``: per-token log probabilities in the ``--json`` records.

``--logprobs K`` and ``--prompt-logprobs K`` set the request parameters of the same names
(:class:`~pyagent_engine.requests.params.SamplingParams`), ``--logprobs-mode`` the engine's
``EngineConfig.logprobs_mode`` (see :mod:`pyagent_engine.requests.logprobs`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Annotated, Any

import typer

if TYPE_CHECKING:
    from pyagent_engine.requests.logprobs import TokenLogprob

PANEL = "Logprobs"

LogprobsOpt = Annotated[int | None, typer.Option(
    "--logprobs", rich_help_panel=PANEL,
    help="Report each generated token's logprob and rank with the K most likely alternatives (0-20) "
         "in the --json records.")]
PromptLogprobsOpt = Annotated[int | None, typer.Option(
    "--prompt-logprobs", rich_help_panel=PANEL,
    help="The same for each prompt token after the first (0-20); the prompt is then computed, not read "
         "from the prefix cache.")]
LogprobsModeOpt = Annotated[str, typer.Option(
    "--logprobs-mode", rich_help_panel=PANEL,
    help="raw: the model's distribution (before the grammar mask and the samplers); processed: the "
         "distribution the token is drawn from (after them).")]


def logprob_records(records: Sequence[TokenLogprob | None] | None,
                    decode: Callable[[int], str] | None = None) -> list[dict[str, Any] | None] | None:
    """``records`` as JSON-ready dicts (:meth:`TokenLogprob.to_dict`), each token with its ``token``
    text when ``decode`` (a token id to its text) is given."""
    if records is None:
        return None
    out: list[dict[str, Any] | None] = []
    for record in records:
        if record is None:
            out.append(None)
            continue
        data = record.to_dict()
        if decode is not None:
            data["token"] = decode(record.token_id)
            for entry in data["top"]:
                entry["token"] = decode(entry["token_id"])
        out.append(data)
    return out
