"""Registers the ``torch`` and ``kernels`` mixer backends. Imported while listing plugins: no torch here."""

from __future__ import annotations

from collections.abc import Callable

from pyagent_core import MixerSpec, OptionSpec, hookimpl
from pyagent_core.install import checkout_install_hint

FAMILIES = ("short_conv", "ssd", "gated_delta", "mla")
INSTALL_HINT = checkout_install_hint("pyagent-mixers", "plugins/mixers/pyagent-mixers")


def chunking(recurrent_below: int) -> dict[str, OptionSpec]:
    """The options of the chunked path, sequences below ``recurrent_below`` new tokens running token by token."""
    return {
        "chunk_size": OptionSpec(type=int, default=64, min=1, max=4096,
                                 help="tokens per chunk of the chunked SSD and delta-rule scans"),
        "recurrent_below": OptionSpec(type=int, default=recurrent_below, min=1, max=1 << 20,
                                      help="sequences with fewer new tokens in a step run token by token instead of "
                                           "chunked"),
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
    options=chunking(16),
    requires=("torch",),
    install_hint=INSTALL_HINT,
    families=FAMILIES,
    dtypes=("float32", "bfloat16"),
)
KERNELS = MixerSpec(
    name="kernels",
    impl="pyagent_mixers.backend:KernelMixer",
    summary="C kernels (pyagent-kernels) for every family: recurrent steps, convolutions, absorbed latent "
            "attention; chunked torch scans for very long prefills.",
    description=(
        "Every sequence below recurrent_below new tokens (by default all but prefills of 65536 tokens and more, "
        "which are scanned in chunks in torch as by `torch`) runs through pyagent-kernels' C kernels token by "
        "token: one call per layer for the whole sub-batch, (sequence, head) items over threads; the short "
        "convolutions and multi-head latent attention, with the per-head key and value projections absorbed into "
        "the query and the output (float32 caches), run in C too."
    ),
    priority=20,
    # the C recurrence beat the torch chunked scans 2-3x on prefills of 64 to 4096 tokens (csrc/README.md)
    options={**chunking(1 << 16), "threads": OptionSpec(type=int, default=1, min=1, max=64,
                                               help="threads one kernel call may use (the caller and "
                                                    "pyagent-kernels' persistent helpers)")},
    requires=("pyagent-kernels",),
    install_hint=INSTALL_HINT,
    families=FAMILIES,
    dtypes=("float32", "bfloat16"),
)


@hookimpl
def pyagent_register_mixers(register: Callable[[MixerSpec], None]) -> None:
    """Register the ``torch`` and ``kernels`` mixer backends."""
    register(TORCH)
    register(KERNELS)
