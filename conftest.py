"""Settings shared by every test directory of the repository (core, kernels, plugins).

Hypothesis explores new random examples on every developer run; CI sets
``PYAGENT_HYPOTHESIS_PROFILE=ci``, which derandomizes it, so a commit that passed once keeps passing
and a failure found locally can be pinned with ``@example``.
"""

from __future__ import annotations

import os

from hypothesis import settings

settings.register_profile("ci", derandomize=True, print_blob=True)
settings.register_profile("dev", print_blob=True)
settings.load_profile(os.environ.get("PYAGENT_HYPOTHESIS_PROFILE", "dev"))
