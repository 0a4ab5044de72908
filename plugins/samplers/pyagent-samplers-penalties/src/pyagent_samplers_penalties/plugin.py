"""Registers the ``penalties`` processor. Imported while listing plugins: no torch, no implementation."""

from __future__ import annotations

from collections.abc import Callable

from pyagent_core import OptionSpec, SamplerSpec, hookimpl
from pyagent_core.install import checkout_install_hint


@hookimpl
def pyagent_register_samplers(register: Callable[[SamplerSpec], None]) -> None:
    """Register ``penalties``: repetition (transformers), frequency and presence (OpenAI) penalties."""
    register(SamplerSpec(
        name="penalties",
        stage="penalties",
        position=10,
        impl="pyagent_samplers_penalties.processor:PenaltiesProcessor",
        summary="Repetition, frequency and presence penalties from per-request token counts.",
        description=(
            "Per-request parameters (else the options): repetition_penalty (> 0, 1: off; divides "
            "positive and multiplies negative logits of tokens in the prompt or output), "
            "frequency_penalty and presence_penalty (in [-2, 2], 0: off; subtract penalty * count and "
            "penalty once for tokens in the output), penalty_last_n (-1: the whole context, 0: "
            "penalties off, N: only the last N tokens of prompt + output). Counts are built once per "
            "request and updated per step in C (pyagent-kernels), with a torch fallback."
        ),
        options={
            "repetition_penalty": OptionSpec(
                type=float, default=1.0, min=0.0, help="repetition penalty of requests that set none (> 0; 1: off)",
                request=True, request_help="Repetition penalty, > 0 (1: off)."),
            "frequency_penalty": OptionSpec(
                type=float, default=0.0, min=-2.0, max=2.0, help="frequency penalty of requests that set none (0: off)",
                request=True, request_help="Frequency penalty, in [-2, 2] (0: off)."),
            "presence_penalty": OptionSpec(
                type=float, default=0.0, min=-2.0, max=2.0, help="presence penalty of requests that set none (0: off)",
                request=True, request_help="Presence penalty, in [-2, 2] (0: off)."),
            "penalty_last_n": OptionSpec(
                type=int, default=-1, min=-1, help="tokens of context penalised (-1: all, 0: off)",
                request=True, request_help="Tokens of context the penalties look at (-1: all)."),
            "backend": OptionSpec(type=str, default="auto", choices=("auto", "c", "torch"),
                                  help="kernel implementation: auto (C if built), c or torch"),
        },
        priority=0,
        requires=("torch", "pyagent_kernels"),
        argmax_invariant=False,
        install_hint=checkout_install_hint("pyagent-samplers-penalties", "plugins/samplers/pyagent-samplers-penalties"),
    ))
