"""Registers the ``paged`` attention backend. Imported while listing plugins: no torch here."""

from __future__ import annotations

from collections.abc import Callable

from pyagent_core import AttentionSpec, OptionSpec, hookimpl
from pyagent_core.install import checkout_install_hint

SPEC = AttentionSpec(
    name="paged",
    impl="pyagent_attention_paged.backend:PagedAttention",
    summary="C kernels (pyagent-kernels) attending directly over the block tables of the paged KV cache.",
    description=(
        "One C call per layer writes the new keys/values at their slots and attends, reading each "
        "sequence's keys/values block by block in place (no gather copy). The query heads of a "
        "key/value head are processed together (GQA: each block read once per group), with an "
        "online float32 softmax; decode, prefill, chunked prefill, mixed batches and draft-tree "
        "masks, sliding windows (only the window's keys are read) and capped scores; float32 and "
        "bfloat16 (widened to float32); any block and head size. A sequence's "
        "output does not depend on the rest of its batch. Without the compiled extension it runs "
        "on pyagent-kernels' pure-torch fallback (much slower) and `--check` reports it unavailable."
    ),
    priority=20,
    options={"threads": OptionSpec(
        type=int, default=0, min=0, max=64,
        help=(
            "threads a call may use: the caller and pyagent-kernels' persistent helpers (the linear "
            "layers' pool), given (sequence, kv head, query tile) items when a call has enough work "
            "(a short decode step stays on the calling thread); 0: torch's thread count when the "
            "backend is made, which is what the engine's products use; 1: the calling thread only"
        ),
    )},
    requires=("pyagent-kernels",),
    install_hint=checkout_install_hint("pyagent-attention-paged", "plugins/attention/pyagent-attention-paged"),
    dtypes=("float32", "bfloat16"),
    prefill=True,
    decode=True,
    tree_mask=True,
    sliding_window=True,
    logits_soft_cap=True,
)
"""The backend's spec record: also what the tests run the conformance kit against."""


@hookimpl
def pyagent_register_attention_backends(register: Callable[[AttentionSpec], None]) -> None:
    """Register the ``paged`` backend."""
    register(SPEC)
