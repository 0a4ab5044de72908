"""AMX is used only where a probe proved it usable: the probe's isolation and its verdict here.

The AMX kernel itself needs a CPU with AMX-TILE and AMX-INT8; where there is none (this test's usual
host), its tile path still runs with the tile products emulated in C (test_kernels_linear_int8.py's
"emulate" variant), so only the tile instructions are untested there.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import pyagent_kernels
from pyagent_kernels._extension import load

pytestmark = pytest.mark.skipif(not pyagent_kernels.status()["compiled"], reason="pyagent_kernels._C is not built")


def cpu_flags() -> set[str]:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("flags"):
            return set(line.split(":", 1)[1].split())
    return set()


def test_a_faulting_instruction_in_the_probe_s_child_does_not_reach_this_process() -> None:
    """The probe runs its instructions in a forked child: a SIGILL there (ud2) is a failed probe."""
    lib = load().lib
    assert lib.pak_int8_probe_child(1) == 0
    assert lib.pak_int8_probe_child(0) == 1
    assert os.getpid() > 0  # still here


@pytest.mark.skipif(not Path("/proc/cpuinfo").exists(), reason="needs Linux's /proc/cpuinfo")
def test_the_probe_s_verdict_matches_the_cpu() -> None:
    lib = load().lib
    reason = pyagent_kernels.status()["amx"]
    if not {"amx_tile", "amx_int8"} <= cpu_flags():
        assert reason.startswith("not advertised") and lib.pak_int8_amx_usable() == 0
    else:  # advertised: usable, or a named step failed; never a crash
        assert reason == "usable" or reason.startswith(("permission denied", "probe failed", "not enabled"))
        assert lib.pak_int8_amx_usable() == (reason == "usable")


def test_modes_are_kept_and_restored() -> None:
    with pyagent_kernels.using_int8(amx="emulate"):
        assert pyagent_kernels.set_amx("off") == "emulate"
    assert pyagent_kernels.set_amx("allow") == "allow"
