"""Settings and fixtures shared by every test directory of the repository (core, engine, kernels, plugins).

Hypothesis explores new random examples on every developer run; CI sets
``PYAGENT_HYPOTHESIS_PROFILE=ci``, which derandomizes it, so a commit that passed once keeps passing
and a failure found locally can be pinned with ``@example``.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings

if os.environ.get("PYTEST_XDIST_WORKER"):
    # A pytest-xdist worker (`make test` runs one per core) gives torch one thread, it and the processes it starts
    # (set here, before anything imports torch): the workers keep the cores busy, and threads of one worker waiting
    # for each other at every kernel's end while the other worker holds a core cost more than they gain.
    os.environ["OMP_NUM_THREADS"] = "1"

settings.register_profile("ci", derandomize=True, print_blob=True)
settings.register_profile("dev", print_blob=True)
settings.load_profile(os.environ.get("PYAGENT_HYPOTHESIS_PROFILE", "dev"))


def _environ(env: Mapping[str, str] | None, extra_path: Path | None) -> dict[str, str]:
    environ = {**os.environ, **(env or {})}
    if extra_path is not None:
        environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(extra_path), environ.get("PYTHONPATH")]))
    return environ


def run_cli(*args: str, env: Mapping[str, str] | None = None, cwd: Path | None = None,
            extra_path: Path | None = None, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    """Run ``python -m pyagent_core.cli ARGS`` in a fresh process (``stdin`` as its input) and capture its output."""
    return subprocess.run([sys.executable, "-m", "pyagent_core.cli", *args], capture_output=True,
                          text=True, env=_environ(env, extra_path), cwd=cwd, timeout=120, input=stdin)


def start_cli(*args: str, stdin: Any = subprocess.PIPE, stdout: Any = subprocess.PIPE,
              env: Mapping[str, str] | None = None, cwd: Path | None = None) -> subprocess.Popen[bytes]:
    """Start ``python -m pyagent_core.cli ARGS`` for a test that talks to it while it runs (``pyagent chat``):
    stderr is a pipe; ``stdin`` and ``stdout`` pipes, or file descriptors such as a pseudo-terminal's."""
    return subprocess.Popen([sys.executable, "-m", "pyagent_core.cli", *args], stdin=stdin, stdout=stdout,
                            stderr=subprocess.PIPE, env=_environ(env, None), cwd=cwd, preexec_fn=_interruptible)


def _interruptible() -> None:
    """In the child: take Ctrl-C as a terminal user's process does. A suite started as a background job
    runs with SIGINT ignored, and Python keeps an ignored SIGINT ignored, so the tests that send one
    would see nothing happen."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.fixture
def cli() -> Callable[..., subprocess.CompletedProcess[str]]:
    """The :func:`run_cli` helper as a fixture."""
    return run_cli


@pytest.fixture
def cli_process() -> Iterator[Callable[..., subprocess.Popen[bytes]]]:
    """The :func:`start_cli` helper as a fixture; processes still running at the end are killed."""
    started: list[subprocess.Popen[bytes]] = []

    def start(*args: str, **kwargs: Any) -> subprocess.Popen[bytes]:
        started.append(start_cli(*args, **kwargs))
        return started[-1]

    yield start
    for process in started:
        if process.poll() is None:
            process.kill()
            process.wait()
