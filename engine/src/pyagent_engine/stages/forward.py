"""Stage 3, model forward: the model plugin's forward over the KV manager's caches and the attention backend."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch

from pyagent_core.interfaces.attention import AttentionBackend
from pyagent_core.interfaces.mixer import MixerBackend
from pyagent_engine.kv.manager import KVCacheManager
from pyagent_engine.stages.records import ModelInputs, StepLogits


@contextlib.contextmanager
def torch_on_one_thread() -> Iterator[None]:
    """Run torch's own ops on the calling thread for the duration of an engine step.

    The linear layers (the C kernel, on the forward's threads) carry the work; torch's ops between
    them are small, and OpenMP workers they wake keep spinning on the other cores afterwards,
    slowing the kernel's helper threads (single-stream decode measured 11% faster without them).
    It spans a whole step, so steps that follow each other never resize torch's thread team.
    """
    previous = torch.get_num_threads()
    if previous == 1:
        yield
        return
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


class Forward:
    """Calls ``model.forward`` once per step.

    Args:
        model: a model with ``forward(input_ids, positions, kv_caches, metadata, attention,
            logits_indices, threads=..., lora_slots=...)`` returning float32 logits for the requested token
            indices (``lora_slots`` is passed only when a row uses a LoRA adapter).
        attention: the selected attention backend instance.
        kv: the KV manager, whose caches the model reads and writes.
        mixer: the mixer backend, passed by keyword to a model that calls mixer families (``None``: the
            model calls none).
    """

    def __init__(self, model: Any, attention: AttentionBackend, kv: KVCacheManager,
                 mixer: MixerBackend | None = None) -> None:
        self.model = model
        self.attention = attention
        self.kv = kv
        self.mixers = {} if mixer is None else {"mixer": mixer}
        self.threads = torch.get_num_threads()  # the kernels' threads, taken before any step narrows torch's

    def run(self, inputs: ModelInputs) -> StepLogits:
        """Run the model on ``inputs``; split the logits into the sampled rows and the prompt rows."""
        lora = {} if inputs.lora_slots is None else {"lora_slots": inputs.lora_slots}
        with torch.inference_mode():
            logits = self.model.forward(inputs.input_ids, inputs.positions, self.kv.caches, inputs.metadata,
                                        self.attention, inputs.logits_indices, threads=self.threads, **lora,
                                        **self.mixers)
        num_sampled = inputs.rows.num_rows
        if not inputs.prompt:
            return StepLogits(inputs.rows, logits)
        parts, row = [], num_sampled
        for request, scored in inputs.prompt:
            parts.append((request, scored, logits[row:row + len(scored)]))
            row += len(scored)
        return StepLogits(inputs.rows, logits[:num_sampled], tuple(parts))
