"""Registers the ``draft-model`` proposer. Imported while listing plugins: keep it light."""

from __future__ import annotations

from collections.abc import Callable

from pyagent_core import OptionSpec, ProposerSpec, hookimpl
from pyagent_core.install import checkout_install_hint

SPEC = ProposerSpec(
    name="draft-model",
    impl="pyagent_spec_draft_model.proposer:DraftModelProposer",
    summary="Drafts with a smaller model of the same tokenizer, run greedily by its own pyagent engine.",
    description=(
        "Loads the draft model (a .gguf file or checkpoint folder; empty: the embedded model) into a "
        "second engine with prefix caching, so each step re-submits the context and recomputes only "
        "its last, uncached block before drafting max_tokens tokens greedily. The draft model's "
        "tokenizer must be the target's: another vocabulary is refused when the engine starts."
    ),
    priority=0,
    options={
        "model": OptionSpec(type=str, default="", help="draft model path (empty: the embedded model)"),
        "dtype": OptionSpec(type=str, default=None, choices=("bfloat16", "float32"),
                            help="the draft model's dtype (unset: the target model's)"),
        "max_tokens": OptionSpec(type=int, default=4, min=1, max=64,
                                 help="most draft tokens (the engine may ask for fewer)"),
        "kv_cache_gib": OptionSpec(type=float, default=0.25, min=0.01, max=64.0,
                                   help="memory for the draft engine's KV cache"),
    },
    install_hint=checkout_install_hint("pyagent-spec-draft-model", "plugins/spec_decode/pyagent-spec-draft-model"),
    needs_model=True,
)
"""The proposer's spec record, also used by the tests."""


@hookimpl
def pyagent_register_proposers(register: Callable[[ProposerSpec], None]) -> None:
    """Register the ``draft-model`` proposer."""
    register(SPEC)
