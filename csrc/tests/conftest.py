"""Fixtures shared by the pyagent-kernels tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import pyagent_kernels


def _supported_isas() -> list[str]:
    status = pyagent_kernels.status()
    return status["isa_supported"]


@pytest.fixture(params=_supported_isas())
def c_isa(request: pytest.FixtureRequest) -> Iterator[str]:
    """Run the test once per instruction-set variant this CPU supports (skipped if not built)."""
    pyagent_kernels.set_isa(request.param)
    yield request.param
    pyagent_kernels.set_isa(None)
