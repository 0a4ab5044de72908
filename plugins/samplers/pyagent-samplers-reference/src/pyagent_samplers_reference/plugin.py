"""Registers the reference samplers. Imported while listing plugins: no torch, no implementations."""

from __future__ import annotations

from collections.abc import Callable

from pyagent_core import OptionSpec, SamplerSpec, hookimpl
from pyagent_core.install import checkout_install_hint

PACKAGE = "pyagent_samplers_reference"
INSTALL_HINT = checkout_install_hint("pyagent-samplers-reference", "plugins/samplers/pyagent-samplers-reference")
# Reference implementations: a faster plugin's samplers should outrank them. Multinomial ranks above
# greedy so that, when nothing is selected, the token is drawn from the processed distribution.
PRIORITY = 0
SELECTOR_PRIORITY = 1
SEED_HELP = "Seed of the request's draws, an integer in [0, 2**64 - 1]: the same seed gives the same tokens."


@hookimpl
def pyagent_register_samplers(register: Callable[[SamplerSpec], None]) -> None:
    """Register temperature, top_k, top_p and min_p (processors) and greedy and multinomial (selectors,
    in the select stage)."""
    register(SamplerSpec(
        name="temperature",
        stage="temperature",
        position=20,
        impl=f"{PACKAGE}.temperature:TemperatureProcessor",
        summary="Divides each row's logits by the request's temperature.",
        description=(
            "Per-request parameter 'temperature' (a finite number >= 0), else the option. "
            "Temperatures 0 and 1 leave the row unchanged: use the greedy selector for greedy decoding."
        ),
        options={"temperature": OptionSpec(
            type=float, default=1.0, min=0.0,
            help="temperature of requests that set none (0 and 1 leave logits unchanged)",
            request=True, request_help="Sampling temperature, >= 0 (0: greedy, 1: logits unchanged).",
        )},
        priority=PRIORITY,
        requires=("torch",),
        argmax_invariant=True,
        install_hint=INSTALL_HINT,
    ))
    register(SamplerSpec(
        name="top_k",
        stage="truncation",
        position=20,
        impl=f"{PACKAGE}.top_k:TopKProcessor",
        summary="Keeps each row's k largest logits (and those tied with the k-th); masks the rest.",
        description=(
            "Per-request parameter 'top_k' (an integer >= 0), else the option; 0 turns it off and a k "
            "at least the vocabulary size keeps every token. Logits equal to the k-th largest are kept."
        ),
        options={"top_k": OptionSpec(
            type=int, default=0, min=0, help="k of requests that set none (0 turns top-k off)",
            request=True, request_help="Keep the k most likely tokens, >= 0 (0: off).",
        )},
        priority=PRIORITY,
        requires=("torch",),
        argmax_invariant=True,
        install_hint=INSTALL_HINT,
    ))
    register(SamplerSpec(
        name="top_p",
        stage="truncation",
        position=40,
        impl=f"{PACKAGE}.top_p:TopPProcessor",
        summary="Keeps each row's smallest set of most probable tokens with total probability >= p.",
        description=(
            "Per-request parameter 'top_p' (a number in [0, 1]), else the option; 1 turns it off and 0 "
            "keeps only the most likely token. Semantics of transformers' TopPLogitsWarper with "
            "min_tokens_to_keep=1; equal logits are ordered by token id, the lower id first."
        ),
        options={"top_p": OptionSpec(
            type=float, default=1.0, min=0.0, max=1.0,
            help="p of requests that set none (1 turns top-p off)",
            request=True, request_help="Keep the most likely tokens up to this total probability, in [0, 1] (1: off).",
        )},
        priority=PRIORITY,
        requires=("torch",),
        argmax_invariant=True,
        install_hint=INSTALL_HINT,
    ))
    register(SamplerSpec(
        name="min_p",
        stage="truncation",
        position=50,
        impl=f"{PACKAGE}.min_p:MinPProcessor",
        summary="Keeps each row's tokens with probability >= min_p times the top probability.",
        description=(
            "Per-request parameter 'min_p' (a number in [0, 1]), else the option; 0 turns it off. "
            "The test is logit - max >= log(min_p) in double precision (transformers' MinPLogitsWarper "
            "up to float rounding, with min_tokens_to_keep=1)."
        ),
        options={"min_p": OptionSpec(
            type=float, default=0.0, min=0.0, max=1.0, help="min_p of requests that set none (0 turns it off)",
            request=True, request_help="Drop tokens below min_p times the top probability, in [0, 1] (0: off).",
        )},
        priority=PRIORITY,
        requires=("torch",),
        argmax_invariant=True,
        install_hint=INSTALL_HINT,
    ))
    register(SamplerSpec(
        name="greedy",
        impl=f"{PACKAGE}.greedy:GreedySelector",
        stage="select",
        summary="Chooses each row's most likely token (the lowest id among equal logits).",
        description="Selected, it makes every request greedy, whatever its temperature.",
        priority=PRIORITY,
        requires=("torch",),
        install_hint=INSTALL_HINT,
    ))
    register(SamplerSpec(
        name="multinomial",
        impl=f"{PACKAGE}.multinomial:MultinomialSelector",
        summary="Draws each row's token from the softmax of its logits, seeded per request.",
        description=(
            "A request with the parameter 'seed' (an integer in [0, 2**64 - 1]) draws from its own "
            "generator: its tokens do not depend on its row or on the rest of the batch. Requests "
            "without a seed share the engine's generator, seeded from the 'seed' option."
        ),
        options={"seed": OptionSpec(
            type=int, default=None, min=0, max=2**64 - 1,
            help="seed of the generator shared by requests without a seed (unset: system entropy)",
            request=True, request_help=SEED_HELP,
        )},
        stage="select",
        priority=SELECTOR_PRIORITY,
        requires=("torch",),
        install_hint=INSTALL_HINT,
    ))
