"""Fixtures shared by the pyagent-kernels tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import pyagent_kernels

ISAS = ("generic", "avx2", "avx512")
"""Every instruction-set variant the kernels are built in (x86-64 with GCC; elsewhere only generic)."""


@pytest.fixture(params=ISAS)
def c_isa(request: pytest.FixtureRequest) -> Iterator[str]:
    """Run the test once per instruction-set variant by name, skipped where the CPU or the build lacks it."""
    if request.param not in pyagent_kernels.status()["isa_supported"]:
        pytest.skip(f"this CPU or build cannot run the {request.param} kernels")
    with pyagent_kernels.using_isa(request.param):
        yield request.param
