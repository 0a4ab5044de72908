"""Settings and fixtures shared by every test directory of the repository (core, engine, kernels, plugins).

Hypothesis explores new random examples on every developer run; CI sets
``PYAGENT_HYPOTHESIS_PROFILE=ci``, which derandomizes it, so a commit that passed once keeps passing
and a failure found locally can be pinned with ``@example``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Mapping
from pathlib import Path

import pytest
from hypothesis import settings

settings.register_profile("ci", derandomize=True, print_blob=True)
settings.register_profile("dev", print_blob=True)
settings.load_profile(os.environ.get("PYAGENT_HYPOTHESIS_PROFILE", "dev"))


def run_cli(*args: str, env: Mapping[str, str] | None = None, cwd: Path | None = None,
            extra_path: Path | None = None, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    """Run ``python -m pyagent_core.cli ARGS`` in a fresh process (``stdin`` as its input) and capture its output."""
    environ = {**os.environ, **(env or {})}
    if extra_path is not None:
        environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(extra_path), environ.get("PYTHONPATH")]))
    return subprocess.run([sys.executable, "-m", "pyagent_core.cli", *args], capture_output=True,
                          text=True, env=environ, cwd=cwd, timeout=120, input=stdin)


@pytest.fixture
def cli() -> Callable[..., subprocess.CompletedProcess[str]]:
    """The :func:`run_cli` helper as a fixture."""
    return run_cli
