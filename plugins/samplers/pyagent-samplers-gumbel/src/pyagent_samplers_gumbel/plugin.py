"""Registers the ``gumbel`` selector. Imported while listing plugins: no torch, no implementation."""

from __future__ import annotations

from collections.abc import Callable

from pyagent_core import OptionSpec, SamplerSpec, hookimpl
from pyagent_core.install import checkout_install_hint


@hookimpl
def pyagent_register_samplers(register: Callable[[SamplerSpec], None]) -> None:
    """Register ``gumbel``: Gumbel-max selection seeded per request."""
    register(SamplerSpec(
        name="gumbel",
        impl="pyagent_samplers_gumbel.selector:GumbelSelector",
        summary="Gumbel-max: each row's token is argmax(logit + Gumbel noise), seeded per request.",
        description=(
            "A request with the parameter 'seed' (an integer in [0, 2**64 - 1]) gets noise that depends "
            "only on its seed, its step and the token id (counter-based, splitmix64), so its tokens do not "
            "depend on its row or on the rest of the batch; the C kernel (pyagent-kernels) and its torch "
            "fallback choose the same token. Requests without a seed take one from the engine's generator, "
            "seeded from the 'seed' option. Noise is computed for finite logits only."
        ),
        options={
            "seed": OptionSpec(type=int, default=None, min=0, max=2**64 - 1,
                               help="seed of the generator that seeds requests without a seed (unset: entropy)",
                               request=True, request_help="Seed of the request's noise, an integer in "
                               "[0, 2**64 - 1]: the same seed gives the same tokens."),
            "backend": OptionSpec(type=str, default="auto", choices=("auto", "c", "torch"),
                                  help="kernel implementation: auto (C if built), c or torch"),
        },
        stage="select",
        priority=0,
        requires=("torch", "pyagent_kernels"),
        install_hint=checkout_install_hint("pyagent-samplers-gumbel", "plugins/samplers/pyagent-samplers-gumbel"),
    ))
