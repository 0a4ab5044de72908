"""The mixer kit against ``torch`` and ``kernels``, with the kit's chunk lengths crossing the chunk size."""

from __future__ import annotations

from typing import Any, ClassVar

import pytest

import pyagent_kernels
from pyagent_core.testing.mixer import MixerConformance
from pyagent_mixers.backend import KernelMixer, TorchMixer
from pyagent_mixers.plugin import KERNELS, TORCH


class TestTorch(MixerConformance):
    impl = TorchMixer
    spec = TORCH


class _TorchSmallChunks(TestTorch):
    """Chunks of 8: every prefill of the kit spans several, and 1- and 2-token sequences run recurrent."""

    options: ClassVar[dict[str, Any]] = {"chunk_size": 8, "recurrent_below": 3}


@pytest.mark.parametrize("check", ["test_prefills_around_chunk_sizes", "test_chunked_prefill_continues_a_context",
                                   "test_a_sequence_in_pieces_carries_its_state"])
def test_small_chunks_carry_the_state(check: str) -> None:
    getattr(_TorchSmallChunks(), check)()


class TestKernels(MixerConformance):
    impl = KernelMixer
    spec = KERNELS

    def test_check_available_passes_here(self) -> None:
        reason = KernelMixer.check_available()
        assert (reason is None) == pyagent_kernels.status()["compiled"]


class _KernelsThreaded(TestKernels):
    """Two threads, and the chunked torch scans from 40 new tokens."""

    options: ClassVar[dict[str, Any]] = {"threads": 2, "recurrent_below": 40}


@pytest.mark.parametrize("check", ["test_mixed_batch", "test_a_sequence_in_pieces_carries_its_state",
                                   "test_a_sequence_gives_the_same_bits_alone_and_batched"])
def test_threads_and_both_paths(check: str) -> None:
    getattr(_KernelsThreaded(), check)()
