"""The per-request parameters of the truncation samplers, with their ranges."""

from __future__ import annotations

from pyagent_sampler_base.request_params import RequestParam

TYPICAL_P = RequestParam(
    name="typical_p", integer=False, min=0.0, max=1.0,
    allowed="a number in [0, 1] (1 turns typical sampling off)",
)
EPSILON_CUTOFF = RequestParam(
    name="epsilon_cutoff", integer=False, min=0.0, max=1.0,
    allowed="a number in [0, 1] (0 turns epsilon sampling off)",
)
ETA_CUTOFF = RequestParam(
    name="eta_cutoff", integer=False, min=0.0, max=1.0,
    allowed="a number in [0, 1] (0 turns eta sampling off)",
)
TOP_N_SIGMA = RequestParam(
    name="top_n_sigma", integer=False, min=0.0,
    allowed="a finite number >= 0 (0 turns top-n-sigma off)",
)
DYNATEMP_RANGE = RequestParam(
    name="dynatemp_range", integer=False, min=0.0,
    allowed="a finite number >= 0 (0 turns dynamic temperature off)",
)
DYNATEMP_EXPONENT = RequestParam(
    name="dynatemp_exponent", integer=False, min=0.0, allowed="a finite number >= 0",
)
