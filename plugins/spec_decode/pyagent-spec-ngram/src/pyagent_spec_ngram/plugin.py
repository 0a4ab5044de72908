"""Registers the ``ngram`` proposer. Imported while listing plugins: keep it light."""

from __future__ import annotations

from collections.abc import Callable

from pyagent_core import OptionSpec, ProposerSpec, hookimpl
from pyagent_core.install import checkout_install_hint
from pyagent_core.interfaces.proposer import KERNEL_BACKEND_OPTION

SPEC = ProposerSpec(
    name="ngram",
    impl="pyagent_spec_ngram.proposer:NgramProposer",
    summary="Prompt lookup: drafts what followed the latest earlier occurrence of the context's last n tokens.",
    description=(
        "Looks for the longest n in [min_n, max_n] such that the last n tokens of the prompt plus "
        "output occurred earlier, and drafts the tokens that followed the most recent such "
        "occurrence (a chain of up to max_tokens), each scored with the probability that the model "
        "accepts it (the acceptance rate learned for the match length it extends). Histories are "
        "indexes appended to each step; matching runs in C (pyagent-kernels) with an identical "
        "pure-Python fallback."
    ),
    priority=10,
    options={
        "min_n": OptionSpec(type=int, default=2, min=1, max=64, help="shortest n-gram that may match"),
        "max_n": OptionSpec(type=int, default=8, min=1, max=64, help="longest n-gram compared"),
        "max_tokens": OptionSpec(type=int, default=8, min=1, max=64,
                                 help="most draft tokens (the engine may ask for fewer)"),
        "backend": KERNEL_BACKEND_OPTION,
    },
    requires=("pyagent-kernels",),
    install_hint=checkout_install_hint("pyagent-spec-ngram", "plugins/spec_decode/pyagent-spec-ngram"),
    tree=False,
)
"""The proposer's spec record, also used by the tests."""


@hookimpl
def pyagent_register_proposers(register: Callable[[ProposerSpec], None]) -> None:
    """Register the ``ngram`` proposer."""
    register(SPEC)
