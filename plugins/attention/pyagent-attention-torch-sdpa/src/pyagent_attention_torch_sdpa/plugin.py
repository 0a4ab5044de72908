"""Registers the ``torch-sdpa`` attention backend. Imported while listing plugins: no torch here."""

from __future__ import annotations

from collections.abc import Callable

from pyagent_core import AttentionSpec, OptionSpec, hookimpl
from pyagent_core.install import checkout_install_hint

SPEC = AttentionSpec(
    name="torch-sdpa",
    impl="pyagent_attention_torch_sdpa.backend:TorchSdpaAttention",
    summary="Reference: gathers keys/values from the paged cache and calls torch's scaled_dot_product_attention.",
    description=(
        "Writes the new keys/values with index_copy_ on a flat view of the cache. Decode steps (one "
        "new token per sequence) get one SDPA call each with batch_invariant on, else one call for the "
        "batch over a padded key tensor with a key-padding mask; sequences with several new tokens "
        "(prefill, chunked prefill, draft trees) "
        "get one SDPA call each with a causal or tree mask. Sliding windows narrow the masks; "
        "capped scores (logits_soft_cap) run the same computation written out in float32. Any head "
        "size and block size."
    ),
    priority=10,
    options={"batch_invariant": OptionSpec(
        type=bool, default=True,
        help=(
            "attend for each decode sequence in its own call, so that its output is bitwise the same "
            "alone or in any batch (costs decode time in large batches)"
        ),
    )},
    requires=("torch",),
    install_hint=checkout_install_hint("pyagent-attention-torch-sdpa",
                                      "plugins/attention/pyagent-attention-torch-sdpa"),
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
    """Register the ``torch-sdpa`` backend."""
    register(SPEC)
