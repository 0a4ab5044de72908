"""Registers the ``suffix`` proposer. Imported while listing plugins: keep it light."""

from __future__ import annotations

from collections.abc import Callable

from pyagent_core import OptionSpec, ProposerSpec, hookimpl
from pyagent_core.install import checkout_install_hint
from pyagent_core.interfaces.proposer import KERNEL_BACKEND_OPTION

SPEC = ProposerSpec(
    name="suffix",
    impl="pyagent_spec_suffix.proposer:SuffixProposer",
    summary="SuffixDecoding: scored draft trees from the request's history and earlier outputs.",
    description=(
        "Matches the longest suffix of the request's prompt plus output (up to max_depth tokens) "
        "against the request itself and against a bounded global store of earlier requests' "
        "outputs (oldest evicted first), takes the continuations of the most recent occurrences "
        "of that match, and counts them into a tree. Each node is scored with the probability "
        "that the model accepts it: the fraction of occurrences that continue through it times "
        "the acceptance rate learned (from how earlier drafts fared) for the match length it "
        "extends. The draft keeps the best-scored nodes reached by at least min_token_prob of the "
        "occurrences, at most spec_factor x match length of them; the engine then verifies only "
        "the nodes expected to pay for their cost. Histories are indexes appended to each step; "
        "matching, drafting and scoring run in C (pyagent-kernels) with an identical Python fallback."
    ),
    priority=20,
    options={
        "max_depth": OptionSpec(type=int, default=32, min=1, max=256, help="longest suffix compared"),
        "min_match": OptionSpec(type=int, default=1, min=1, max=256, help="shortest suffix that may match"),
        "max_tokens": OptionSpec(type=int, default=16, min=1, max=128,
                                 help="most draft nodes (the engine may ask for fewer)"),
        "max_hits": OptionSpec(type=int, default=64, min=1, max=1024,
                               help="occurrences of the match whose continuations are counted"),
        "spec_factor": OptionSpec(type=float, default=3.0, min=0.0, max=64.0,
                                  help="draft at most ceil(spec_factor * match length) nodes"),
        "min_token_prob": OptionSpec(type=float, default=0.1, min=0.0, max=1.0,
                                     help="drop nodes that fewer than this fraction of occurrences reach"),
        "tree": OptionSpec(type=bool, default=True, help="draft trees (False: the single best chain)"),
        "global_max_tokens": OptionSpec(type=int, default=4096, min=0, max=1 << 24,
                                        help="tokens of earlier outputs kept for matching (0: no global store)"),
        "backend": KERNEL_BACKEND_OPTION,
    },
    requires=("pyagent-kernels",),
    install_hint=checkout_install_hint("pyagent-spec-suffix", "plugins/spec_decode/pyagent-spec-suffix"),
    tree=True,
)
"""The proposer's spec record, also used by the tests."""


@hookimpl
def pyagent_register_proposers(register: Callable[[ProposerSpec], None]) -> None:
    """Register the ``suffix`` proposer."""
    register(SPEC)
