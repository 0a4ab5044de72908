"""The mixer kit against ``torch`` and ``kernels``, with the kit's chunk lengths crossing the chunk size."""

from __future__ import annotations

from typing import Any, ClassVar

import pyagent_kernels
from pyagent_core.testing.mixer import MixerConformance
from pyagent_mixers.backend import KernelMixer, TorchMixer
from pyagent_mixers.plugin import KERNELS, TORCH


class TestTorch(MixerConformance):
    impl = TorchMixer
    spec = TORCH


class TestTorchSmallChunks(TestTorch):
    """Chunks of 8: every prefill of the kit spans several, and 1- and 2-token sequences run recurrent."""

    options: ClassVar[dict[str, Any]] = {"chunk_size": 8, "recurrent_below": 3}


class TestKernels(MixerConformance):
    impl = KernelMixer
    spec = KERNELS

    def test_check_available_passes_here(self) -> None:
        reason = KernelMixer.check_available()
        assert (reason is None) == pyagent_kernels.status()["compiled"]


class TestKernelsThreaded(TestKernels):
    options: ClassVar[dict[str, Any]] = {"threads": 2, "recurrent_below": 40}
