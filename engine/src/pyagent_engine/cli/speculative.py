"""The speculative-decoding options of ``pyagent generate`` and the line they add to its summary."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Annotated, Any

import typer

from pyagent_core.options import parse_assignments

if TYPE_CHECKING:
    from pyagent_engine.api.llm import LLM
    from pyagent_engine.spec.config import SpeculativeConfig

SpeculativeOpt = Annotated[str | None, typer.Option(
    "--speculative", help="Speculative decoding with this proposer (`pyagent list proposer`).")]
NumDraftOpt = Annotated[int, typer.Option(
    "--num-draft-tokens", help="Most draft tokens per request and step (with --speculative).")]
SpecOptsOpt = Annotated[list[str] | None, typer.Option("--spec-opt", help="Proposer option KEY=VALUE.")]


def speculative_config(name: str | None, num_draft_tokens: int, spec_opt: list[str] | None) -> SpeculativeConfig | None:
    """The engine's speculative settings from the CLI flags (``None`` without ``--speculative``)."""
    if name is None:
        if spec_opt:
            raise typer.BadParameter("--spec-opt needs --speculative NAME", param_hint="--spec-opt")
        return None
    from pyagent_engine.spec.config import SpeculativeConfig

    return SpeculativeConfig(proposer=name, options=parse_assignments(spec_opt or []),
                             num_draft_tokens=num_draft_tokens)


def speculative_stats(llm: LLM) -> dict[str, Any] | None:
    """The engine's drafting counters so far (``None`` without speculation)."""
    spec = llm.engine.speculative
    return None if spec is None else spec.stats.as_dict()


def speculative_notes(llm: LLM) -> str:
    """What the summary line adds under speculation: drafts, acceptance and proposer cost."""
    stats = speculative_stats(llm)
    if stats is None:
        return ""
    if not stats["num_drafts"]:
        return f"; speculative: no drafts verified ({stats['num_proposer_calls']} proposer calls)"
    return (f"; speculative: {stats['num_drafts']} drafts, {stats['num_draft_tokens']} draft tokens, "
            f"mean accepted length {stats['mean_accepted_length']:.2f}, acceptance {stats['acceptance_rate']:.2f}, "
            f"accepted per position {json.dumps(stats['accepted_per_position'])}, "
            f"proposer {stats['proposer_us_per_call']:.1f} us/step"
            + (f", {stats['num_dropped']} drafts dropped" if stats["num_dropped"] else ""))
