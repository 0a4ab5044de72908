"""The per-request parameters of the llama.cpp samplers, with their ranges."""

from __future__ import annotations

from pyagent_sampler_base.request_params import RequestParam
from pyagent_sampler_base.token_params import TokenSequencesParam

DRY_MULTIPLIER = RequestParam(
    name="dry_multiplier", integer=False, min=0.0, allowed="a finite number >= 0 (0 turns DRY off)",
)
DRY_BASE = RequestParam(name="dry_base", integer=False, min=1.0, allowed="a finite number >= 1")
DRY_ALLOWED_LENGTH = RequestParam(
    name="dry_allowed_length", integer=True, min=1, allowed="an integer >= 1 (repeats this long are free)",
)
DRY_PENALTY_LAST_N = RequestParam(
    name="dry_penalty_last_n", integer=True, min=-1,
    allowed="an integer >= -1 (-1: the whole context, 0 turns DRY off)",
)
DRY_SEQUENCE_BREAKERS = TokenSequencesParam(name="dry_sequence_breakers", text=True)
XTC_PROBABILITY = RequestParam(
    name="xtc_probability", integer=False, min=0.0, max=1.0,
    allowed="a number in [0, 1] (0 turns XTC off)",
)
XTC_THRESHOLD = RequestParam(
    name="xtc_threshold", integer=False, min=0.0, max=1.0,
    allowed="a number in [0, 1] (above 0.5 XTC never removes anything)",
)
MIROSTAT = RequestParam(
    name="mirostat", integer=True, min=0, max=2, allowed="0 (off), 1 (mirostat) or 2 (mirostat v2)",
)
MIROSTAT_TAU = RequestParam(
    name="mirostat_tau", integer=False, min=0.0, allowed="a finite number >= 0 (target surprise, in bits)",
)
MIROSTAT_ETA = RequestParam(
    name="mirostat_eta", integer=False, min=0.0, allowed="a finite number >= 0 (learning rate)",
)
