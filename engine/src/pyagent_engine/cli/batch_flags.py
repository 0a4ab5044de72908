"""Batch flags of ``pyagent generate``: how many requests run at once, the step's token budget, the KV block size.

They set the :class:`~pyagent_engine.engine.EngineConfig` fields of the same names, as vLLM's
``--max-num-seqs``, ``--max-num-batched-tokens`` and ``--block-size`` do.
"""

from __future__ import annotations

from typing import Annotated

import typer

PANEL = "Batching"

MaxNumSeqsOpt = Annotated[int, typer.Option(
    "--max-num-seqs", rich_help_panel=PANEL, help="Most requests running at once; the others wait.")]
MaxNumBatchedTokensOpt = Annotated[int, typer.Option(
    "--max-num-batched-tokens", rich_help_panel=PANEL,
    help="Token budget of one step (prefill chunks plus decodes); longer prompts are prefilled in chunks.")]
BlockSizeOpt = Annotated[int, typer.Option(
    "--block-size", rich_help_panel=PANEL,
    help="Tokens per KV-cache block (the attention backend may allow only some sizes).")]


def batch_config(max_num_seqs: int, max_num_batched_tokens: int, block_size: int) -> dict[str, int]:
    """The :class:`~pyagent_engine.engine.EngineConfig` fields the batch flags set."""
    return {"max_num_seqs": max_num_seqs, "max_num_batched_tokens": max_num_batched_tokens, "block_size": block_size}
