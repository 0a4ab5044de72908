"""Batch flags of ``pyagent generate``: how many requests run at once, the step's token budget, the KV block
size, and the scheduling policy (also on ``pyagent chat``).

They set the :class:`~pyagent_engine.core.config.EngineConfig` fields of the same names, as vLLM's
``--max-num-seqs``, ``--max-num-batched-tokens`` and ``--block-size`` do.
"""

from __future__ import annotations

from typing import Annotated, Any

import typer

from pyagent_core.options import parse_assignments

PANEL = "Batching"

MaxNumSeqsOpt = Annotated[int, typer.Option(
    "--max-num-seqs", rich_help_panel=PANEL, help="Most requests running at once; the others wait.")]
MaxNumBatchedTokensOpt = Annotated[int, typer.Option(
    "--max-num-batched-tokens", rich_help_panel=PANEL,
    help="Token budget of one step (prefill chunks plus decodes); longer prompts are prefilled in chunks.")]
BlockSizeOpt = Annotated[int, typer.Option(
    "--block-size", rich_help_panel=PANEL,
    help="Tokens per KV-cache block (the attention backend may allow only some sizes).")]

SchedulerOpt = Annotated[str | None, typer.Option(
    "--scheduler", rich_help_panel=PANEL,
    help="Scheduling policy: waiting-queue order and preemption victim (default: selection; "
         "see `pyagent list scheduler`).")]
SchedulerOptsOpt = Annotated[list[str] | None, typer.Option(
    "--scheduler-opt", rich_help_panel=PANEL, help="Scheduling policy option KEY=VALUE (repeatable).")]


def scheduler_config(scheduler: str | None, scheduler_opt: list[str] | None) -> dict[str, Any]:
    """The :class:`~pyagent_engine.core.config.EngineConfig` fields the scheduler flags set."""
    return {"scheduler": scheduler, "scheduler_options": parse_assignments(scheduler_opt or [])}


def batch_config(max_num_seqs: int, max_num_batched_tokens: int, block_size: int) -> dict[str, int]:
    """The :class:`~pyagent_engine.core.config.EngineConfig` fields the batch flags set."""
    return {"max_num_seqs": max_num_seqs, "max_num_batched_tokens": max_num_batched_tokens, "block_size": block_size}
