"""Registers the truncation samplers. Imported while listing plugins: no torch, no implementations."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

from pyagent_core import OptionSpec, SamplerSpec, hookimpl
from pyagent_core.install import checkout_install_hint

PACKAGE = "pyagent_samplers_truncation"
INSTALL_HINT = checkout_install_hint("pyagent-samplers-truncation", "plugins/samplers/pyagent-samplers-truncation")


@hookimpl
def pyagent_register_samplers(register: Callable[[SamplerSpec], None]) -> None:
    """Register typical, epsilon, eta, top_n_sigma and dynatemp (all logits processors)."""
    spec = partial(SamplerSpec, priority=0, requires=("torch",), install_hint=INSTALL_HINT)
    register(spec(
        name="typical",
        stage="truncation",
        position=30,
        impl=f"{PACKAGE}.typical:TypicalProcessor",
        summary="Locally typical sampling: keeps the tokens whose surprise is closest to the entropy.",
        description=(
            "Per-request parameter 'typical_p' (a number in [0, 1]), else the option; 1 turns it off. "
            "Semantics of transformers' TypicalLogitsWarper with min_tokens_to_keep=1."
        ),
        options={"typical_p": OptionSpec(
            type=float, default=1.0, min=0.0, max=1.0, help="probability mass of the typical set (1: off)",
            request=True, request_help="Locally typical sampling mass, in [0, 1] (1: off).")},
        argmax_invariant=False,
    ))
    register(spec(
        name="epsilon",
        stage="truncation",
        position=70,
        impl=f"{PACKAGE}.cutoffs:EpsilonProcessor",
        summary="Epsilon sampling: removes tokens with probability below epsilon_cutoff.",
        description=(
            "Per-request parameter 'epsilon_cutoff' (a number in [0, 1]), else the option; 0 turns it "
            "off. Semantics of transformers' EpsilonLogitsWarper: the most likely token always stays."
        ),
        options={"epsilon_cutoff": OptionSpec(
            type=float, default=0.0, min=0.0, max=1.0, help="probability cutoff (0: off; the paper uses 3e-4 to 9e-4)",
            request=True, request_help="Epsilon sampling cutoff, in [0, 1] (0: off).")},
        argmax_invariant=True,
    ))
    register(spec(
        name="eta",
        stage="truncation",
        position=60,
        impl=f"{PACKAGE}.cutoffs:EtaProcessor",
        summary="Eta sampling: removes tokens below min(eta, sqrt(eta) * exp(-entropy)).",
        description=(
            "Per-request parameter 'eta_cutoff' (a number in [0, 1]), else the option; 0 turns it off. "
            "Semantics of transformers' EtaLogitsWarper: the most likely token always stays."
        ),
        options={"eta_cutoff": OptionSpec(
            type=float, default=0.0, min=0.0, max=1.0, help="eta (0: off; the paper uses 3e-4 to 2e-3)",
            request=True, request_help="Eta sampling cutoff, in [0, 1] (0: off).")},
        argmax_invariant=True,
    ))
    register(spec(
        name="top_n_sigma",
        stage="truncation",
        position=10,
        impl=f"{PACKAGE}.top_n_sigma:TopNSigmaProcessor",
        summary="Top-n-sigma: keeps the logits within n standard deviations of the largest.",
        description=(
            "Per-request parameter 'top_n_sigma' (a finite number >= 0), else the option; 0 turns it off. "
            "Mean and standard deviation over the row's finite logits, as llama.cpp's top-n-sigma."
        ),
        options={"top_n_sigma": OptionSpec(
            type=float, default=0.0, min=0.0, help="n, in standard deviations below the largest logit (0: off)",
            request=True, request_help="Keep logits within n standard deviations of the top, >= 0 (0: off).")},
        argmax_invariant=True,
    ))
    register(spec(
        name="dynatemp",
        stage="temperature",
        position=10,
        impl=f"{PACKAGE}.dynatemp:DynamicTemperatureProcessor",
        summary="Dynamic temperature in [T - range, T + range], set by the row's normalised entropy.",
        description=(
            "Per-request parameters 'dynatemp_range' (>= 0, 0 turns it off) and 'dynatemp_exponent' "
            "(>= 0), with the request's 'temperature' as T, as llama.cpp's --dynatemp-range and "
            "--dynatemp-exp. Multiplies the row by T / T_dyn: place it right before 'temperature'."
        ),
        options={
            "dynatemp_range": OptionSpec(
                type=float, default=0.0, min=0.0, help="half-width of the temperature range (0: off)",
                request=True, request_help="Dynamic temperature in [T - range, T + range], >= 0 (0: off)."),
            "dynatemp_exponent": OptionSpec(
                type=float, default=1.0, min=0.0, help="exponent applied to the normalised entropy",
                request=True, request_help="Exponent of the entropy in dynamic temperature, >= 0."),
        },
        argmax_invariant=True,
    ))
