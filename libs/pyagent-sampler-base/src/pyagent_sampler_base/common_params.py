"""Per-request parameters that several samplers read, defined once so they accept the same values.

``temperature`` is read by the temperature processor and by processors that work relative to it
(dynamic temperature); ``seed`` by every sampler that draws random numbers for a request (the
multinomial selector, XTC's coin). Each is a :class:`~pyagent_sampler_base.request_params.RequestParam`.
"""

from __future__ import annotations

from pyagent_sampler_base.request_params import RequestParam

TEMPERATURE = RequestParam(
    name="temperature",
    integer=False,
    min=0.0,
    allowed="a finite number >= 0 (0 and 1 leave the logits unchanged)",
)
SEED = RequestParam(
    name="seed",
    integer=True,
    min=0,
    max=2**64 - 1,
    allowed="an integer in [0, 2**64 - 1], or None to draw from the engine's generator",
)
