"""The attention conformance kit against ``paged``, on one thread and split over threads."""

from __future__ import annotations

from typing import Any, ClassVar

import pyagent_kernels
from pyagent_attention_paged.backend import PagedAttention
from pyagent_attention_paged.plugin import SPEC
from pyagent_core.testing.attention import AttentionConformance


class TestPaged(AttentionConformance):
    impl = PagedAttention
    spec = SPEC

    def test_check_available_passes_here(self) -> None:
        reason = PagedAttention.check_available()
        if pyagent_kernels.status()["compiled"]:
            assert reason is None
        else:
            assert reason is not None and "not built" in reason


class TestPagedThreaded(TestPaged):
    options: ClassVar[dict[str, Any]] = {"threads": 2}
