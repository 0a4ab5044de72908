"""Registers the ``torch`` and ``kernels`` mixer backends. Imported while listing plugins: no torch here."""

from __future__ import annotations

from collections.abc import Callable

from pyagent_core import MixerSpec, OptionSpec, hookimpl

FAMILIES = ("short_conv", "ssd", "gated_delta", "mla")
CHUNKING = {
    "chunk_size": OptionSpec(type=int, default=64, min=1, max=4096,
                             help="tokens per chunk of the chunked SSD and delta-rule scans"),
    "recurrent_below": OptionSpec(type=int, default=16, min=1, max=1 << 20,
                                  help="sequences with fewer new tokens in a step (decode steps, short chunks) run "
                                       "token by token instead of chunked"),
}

TORCH = MixerSpec(
    name="torch",
    impl="pyagent_mixers.backend:TorchMixer",
    summary="Every mixer family in torch: chunked SSD and delta-rule scans, one-step updates for decode.",
    description=(
        "The reference: Mamba2's state space duality and Gated DeltaNet's WY form scan prefills chunk by "
        "chunk, handing the state from chunk to chunk and to the decode steps, which run token by token "
        "(pyagent-kernels' torch fallbacks); short convolutions through conv1d per sequence; multi-head "
        "latent attention with each cached latent expanded into every head's key and value."
    ),
    priority=10,
    options=CHUNKING,
    requires=("torch",),
    install_hint="pip install pyagent-mixers",
    families=FAMILIES,
    dtypes=("float32", "bfloat16"),
)
KERNELS = MixerSpec(
    name="kernels",
    impl="pyagent_mixers.backend:KernelMixer",
    summary="The torch backend's chunked scans with C kernels (pyagent-kernels) for convolutions, decode steps "
            "and absorbed latent attention.",
    description=(
        "Prefills are scanned in chunks in torch as by `torch`; decode steps and short chunks run through "
        "pyagent-kernels' C kernels (one call per layer for the whole sub-batch, (sequence, head) items over "
        "threads), as do the short convolutions and multi-head latent attention with the per-head key and "
        "value projections absorbed into the query and the output (float32 caches)."
    ),
    priority=20,
    options={**CHUNKING, "threads": OptionSpec(type=int, default=1, min=1, max=64,
                                               help="threads one kernel call may use (the caller and "
                                                    "pyagent-kernels' persistent helpers)")},
    requires=("pyagent-kernels",),
    install_hint="pip install pyagent-mixers (and a C compiler to build pyagent-kernels)",
    families=FAMILIES,
    dtypes=("float32", "bfloat16"),
)


@hookimpl
def pyagent_register_mixers(register: Callable[[MixerSpec], None]) -> None:
    """Register the ``torch`` and ``kernels`` mixer backends."""
    register(TORCH)
    register(KERNELS)
