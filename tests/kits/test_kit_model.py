"""Meta-tests of the model kit: the scaffold's Llama-shaped declaration passes it (transformers' Llama
as the reference), broken variants fail it."""

from __future__ import annotations

import pytest
import torch

from pyagent_core.interfaces.attention import AttentionBackend, AttentionMetadata
from pyagent_core.interfaces.model import ModelConfig
from pyagent_core.testing.model import ModelConformance
from pyagent_core.testing.scaffolded import import_template

pytest.importorskip("pyagent_model_base")
reference = import_template("model")
Declared = reference.impl.KitReference
# The scaffold's own conformance test, run here on the architecture it scaffolds.
TestDeclared = reference.tests.TestKitReference


class IgnoresPositions(Declared):
    """Broken: rotates every token as if it were at position 0 (consistent with itself; only the
    reference sees it)."""

    def forward(self, input_ids, positions, kv_caches, metadata, attention, logits_indices, threads=None):
        return super().forward(input_ids, torch.zeros_like(positions), kv_caches, metadata, attention,
                               logits_indices, threads)


class ForgetsTheCache(Declared):
    """Broken: attends over fresh caches every step, so a decode step never sees earlier tokens."""

    def forward(self, input_ids, positions, kv_caches, metadata, attention, logits_indices, threads=None):
        fresh = [torch.zeros_like(cache) for cache in kv_caches]
        return super().forward(input_ids, positions, fresh, metadata, attention, logits_indices, threads)


class SkipsLastLayer(Declared):
    """Broken: never calls attention for its last layer."""

    def forward(self, input_ids, positions, kv_caches, metadata, attention, logits_indices, threads=None):
        last = self.config.num_layers - 1

        class Skipping(AttentionBackend):
            def forward(self, q, k, v, kv_cache, md: AttentionMetadata, layer: int):
                return torch.zeros_like(q) if layer == last else attention.forward(q, k, v, kv_cache, md, layer)

        return super().forward(input_ids, positions, kv_caches, metadata, Skipping({}, attention.context),
                               logits_indices, threads)


class LosesAGgufName(Declared):
    """Broken: its GGUF map misses the output norm."""

    @classmethod
    def gguf_tensor_names(cls, config: ModelConfig) -> dict[str, str]:
        return {k: v for k, v in super().gguf_tensor_names(config).items() if k != "output_norm.weight"}


class ScaledLogits(Declared):
    """Broken: its logits are 1% off transformers'."""

    def forward(self, *args, **kwargs):
        return super().forward(*args, **kwargs) * 1.01


class BatchDependent(Declared):
    """Broken: its logits move with the number of sequences in the batch."""

    def forward(self, input_ids, positions, kv_caches, metadata, attention, logits_indices, threads=None):
        logits = super().forward(input_ids, positions, kv_caches, metadata, attention, logits_indices, threads)
        return logits * (1 + 1e-3 * metadata.num_seqs)


class IgnoresAdapters(Declared):
    """Broken: runs every row on the base model whatever its LoRA slot."""

    def forward(self, input_ids, positions, kv_caches, metadata, attention, logits_indices, threads=None,
                lora_slots=None):
        return super().forward(input_ids, positions, kv_caches, metadata, attention, logits_indices, threads)


class OneAdapterPerStep(Declared):
    """Broken: applies the first row's adapter to every row of a step."""

    def forward(self, input_ids, positions, kv_caches, metadata, attention, logits_indices, threads=None,
                lora_slots=None):
        if lora_slots is not None:
            lora_slots = torch.full_like(lora_slots, int(lora_slots[0]))
        return super().forward(input_ids, positions, kv_caches, metadata, attention, logits_indices, threads,
                               lora_slots)


class ServesNoneIgnoresSlots(Declared):
    """Broken: declares no LoRA targets, yet runs rows naming a slot as the base model instead of refusing
    them."""

    @classmethod
    def lora_targets(cls, config: ModelConfig) -> dict[str, tuple[int, int]]:
        return {}

    def forward(self, input_ids, positions, kv_caches, metadata, attention, logits_indices, threads=None,
                lora_slots=None):
        return super().forward(input_ids, positions, kv_caches, metadata, attention, logits_indices, threads)


class ForgetsAKey(Declared):
    """Broken: does not write intermediate_size back to config.json."""

    @classmethod
    def hf_config(cls, config: ModelConfig) -> dict:
        return {k: v for k, v in super().hf_config(config).items() if k != "intermediate_size"}


def _kit(impl: type) -> ModelConformance:
    return type(f"{impl.__name__}Kit", (TestDeclared,), {"impl": impl})()


@pytest.mark.parametrize(("impl", "check"), [
    (IgnoresPositions, "test_matches_the_reference_implementation"),
    (ForgetsTheCache, "test_decode_steps_give_the_prefill_logits"),
    (SkipsLastLayer, "test_forward_gives_float32_logits_of_the_asked_rows_and_attends_once_per_layer"),
    (LosesAGgufName, "test_gguf_names_cover_every_weight_once"),
    (ScaledLogits, "test_matches_the_reference_implementation"),
    (ForgetsTheCache, "test_a_prompt_in_chunks_then_decode_steps_gives_one_prefills_logits"),
    (BatchDependent, "test_a_sequence_gives_its_logits_in_any_batch"),
    (IgnoresAdapters, "test_lora_rows_give_the_merged_weights_logits"),
    (OneAdapterPerStep, "test_a_mixed_lora_batch_gives_each_row_its_own_logits"),
], ids=["ignores-positions", "forgets-the-cache", "skips-last-layer", "loses-a-gguf-name", "scaled-logits",
        "forgets-earlier-chunks", "batch-dependent", "ignores-adapters", "one-adapter-per-step"])
def test_kit_catches_broken_architecture(impl: type, check: str) -> None:
    with pytest.raises(AssertionError):
        getattr(_kit(impl), check)()


def test_kit_catches_a_model_without_adapters_that_ignores_lora_slots() -> None:
    with pytest.raises(pytest.fail.Exception, match="DID NOT RAISE"):
        _kit(ServesNoneIgnoresSlots).test_a_model_without_adapters_refuses_them()


def test_kit_catches_a_config_that_does_not_round_trip() -> None:
    with pytest.raises(Exception, match="intermediate_size"):
        _kit(ForgetsAKey).test_hf_config_round_trips()


def test_random_weights_keep_norms_near_one_and_scale_matrices_by_fan_in() -> None:
    from pyagent_core.testing.model import random_weights

    weights = random_weights({"a.norm.weight": (4096,), "b.weight": (256, 4096), "embed.weight": (10, 4096)})
    assert abs(weights["a.norm.weight"].mean().item() - 1) < 0.01
    assert abs(weights["b.weight"].std().item() - 4096**-0.5) < 1e-3
    assert abs(weights["embed.weight"].std().item() - 1) < 0.05
