"""Registers the llama.cpp samplers. Imported while listing plugins: no torch, no implementations."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

from pyagent_core import OptionSpec, SamplerSpec, hookimpl
from pyagent_core.install import checkout_install_hint

PACKAGE = "pyagent_samplers_llamacpp"
INSTALL_HINT = checkout_install_hint("pyagent-samplers-llamacpp", "plugins/samplers/pyagent-samplers-llamacpp")


@hookimpl
def pyagent_register_samplers(register: Callable[[SamplerSpec], None]) -> None:
    """Register dry, xtc and mirostat (all logits processors)."""
    spec = partial(SamplerSpec, priority=0, requires=("torch",), install_hint=INSTALL_HINT)
    register(spec(
        name="dry",
        stage="penalties",
        position=20,
        impl=f"{PACKAGE}.dry:DryProcessor",
        summary="DRY: penalises tokens that would extend a sequence repeated from the context.",
        description=(
            "llama.cpp's DRY sampler over the request's prompt and output. Per-request parameters "
            "(else the options): dry_multiplier, dry_base, dry_allowed_length, dry_penalty_last_n and "
            "dry_sequence_breakers (strings, as in llama.cpp, or token id sequences; unset: llama.cpp's "
            "'\\n' ':' '\"' '*'). A token extending a repeat of n >= allowed_length tokens loses "
            "multiplier * base ** (n - allowed_length); past FLT_MAX its logit becomes -inf."
        ),
        options={
            "dry_multiplier": OptionSpec(type=float, default=0.0, min=0.0, help="penalty scale (0: off)",
                                         request=True, request_help="DRY penalty scale, >= 0 (0: off)."),
            "dry_base": OptionSpec(type=float, default=1.75, min=1.0, help="growth of the penalty per token",
                                   request=True, request_help="DRY penalty growth per repeated token, >= 1."),
            "dry_allowed_length": OptionSpec(
                type=int, default=2, min=1, help="repeats up to this long are not penalised",
                request=True, request_help="Repeats up to this long are not penalised by DRY, >= 1."),
            "dry_penalty_last_n": OptionSpec(
                type=int, default=-1, min=-1, help="tokens of context scanned (-1: all, 0: off)",
                request=True, request_help="Tokens of context DRY scans, >= -1 (-1: all, 0: off)."),
            "dry_sequence_breakers": OptionSpec(
                type=list[str], default=None,
                help="strings that break a repeat (unset: llama.cpp's '\\n' ':' '\"' '*' where there is a tokenizer)",
                request=True, request_help=(
                    "DRY sequence breaker string, escapes such as \\n read (repeatable; replaces the default "
                    "'\\n' ':' '\"' '*'; 'none': no breakers).")),
        },
        argmax_invariant=False,
    ))
    register(spec(
        name="xtc",
        stage="truncation",
        position=80,
        impl=f"{PACKAGE}.xtc:XtcProcessor",
        summary="XTC: with some probability, removes every likely token but the least likely of them.",
        description=(
            "llama.cpp's XTC sampler. Per-request parameters xtc_probability (in [0, 1], 0: off) and "
            "xtc_threshold (in [0, 1]); a request's 'seed' seeds its own coin flips."
        ),
        options={
            "xtc_probability": OptionSpec(
                type=float, default=0.0, min=0.0, max=1.0,
                help="chance of removing the top choices at each step (0: off)",
                request=True, request_help="Chance per step that XTC removes the top choices, in [0, 1] (0: off)."),
            "xtc_threshold": OptionSpec(
                type=float, default=0.1, min=0.0, max=1.0,
                help="probability from which a token counts as a top choice",
                request=True, request_help="Probability from which XTC counts a token as a top choice, in [0, 1]."),
            "seed": OptionSpec(type=int, default=None, min=0, max=2**64 - 1,
                               help="seed of the coin flips of requests without a seed (unset: entropy)",
                               request=True, request_help="Seed of the request's coin flips, in [0, 2**64 - 1]."),
        },
        argmax_invariant=False,
    ))
    register(spec(
        name="mirostat",
        stage="final",
        position=10,
        impl=f"{PACKAGE}.mirostat:MirostatProcessor",
        summary="Mirostat v1/v2: truncates so that the surprise of sampled tokens tracks tau.",
        description=(
            "llama.cpp's mirostat. Per-request parameters mirostat (0: off, 1 or 2), mirostat_tau "
            "(target surprise in bits) and mirostat_eta (learning rate); each request keeps its running "
            "mu. Put it last among the processors."
        ),
        options={
            "mirostat": OptionSpec(type=int, default=0, choices=(0, 1, 2), help="version (0: off)",
                                   request=True, request_help="Mirostat version: 0 (off), 1 or 2."),
            "mirostat_tau": OptionSpec(type=float, default=5.0, min=0.0, help="target surprise, in bits",
                                       request=True, request_help="Mirostat target surprise in bits, >= 0."),
            "mirostat_eta": OptionSpec(type=float, default=0.1, min=0.0, help="learning rate of mu",
                                       request=True, request_help="Mirostat learning rate, >= 0."),
        },
        argmax_invariant=True,
    ))
