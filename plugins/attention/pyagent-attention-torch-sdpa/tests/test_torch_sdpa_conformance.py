"""The attention conformance kit against ``torch-sdpa``, with batch invariance on (the default) and off."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from pyagent_attention_torch_sdpa.backend import TorchSdpaAttention
from pyagent_attention_torch_sdpa.plugin import SPEC
from pyagent_core.testing.attention import AttentionConformance


class TestTorchSdpa(AttentionConformance):
    impl = TorchSdpaAttention
    spec = SPEC


class TestTorchSdpaUnpadded(TestTorchSdpa):
    options: ClassVar[Mapping[str, Any]] = {"batch_invariant": False}
