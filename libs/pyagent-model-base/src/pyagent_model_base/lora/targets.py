"""Which weights of the shared decoder a LoRA adapter may adapt, and where each one lands.

The decoder runs four products per layer (:class:`~pyagent_model_base.step_plan.LayerWeights`):
``qkv`` (the q, k and v projections stacked, or one fused matrix), ``o_proj``, ``gate_up`` (gate and
up stacked, or fused) and ``down``. An adapter names Hugging Face weights: each of them is one
*slice* of one of those products: ``self_attn.k_proj`` is the second slice of ``qkv`` when the
layout keeps q, k and v apart, and Phi-3's fused ``self_attn.qkv_proj`` is the whole of it.
"""

from __future__ import annotations

import attrs

from pyagent_core.interfaces.model import ModelConfig
from pyagent_model_base.layout import DecoderLayout

#: The products of a decoder layer an adapter may adapt (fields of ``LayerWeights``), in step order.
PROJECTIONS = ("qkv", "o_proj", "gate_up", "down")


@attrs.frozen
class Target:
    """Where an adaptable weight lands: slice ``index`` of ``projection`` in layer ``layer``."""

    layer: int
    projection: str
    index: int


def layer_targets(layout: DecoderLayout, layer: int) -> dict[str, Target]:
    """Hugging Face weight name -> :class:`Target`, for the adaptable weights of decoder layer ``layer``."""
    prefix = f"model.layers.{layer}."
    names = {"qkv": layout.qkv, "o_proj": ("self_attn.o_proj",), "gate_up": layout.gate_up,
             "down": ("mlp.down_proj",)}
    return {f"{prefix}{name}.weight": Target(layer, projection, index)
            for projection in PROJECTIONS for index, name in enumerate(names[projection])}


def decoder_targets(layout: DecoderLayout, config: ModelConfig) -> dict[str, Target]:
    """Hugging Face weight name -> :class:`Target`, for every adaptable weight of the model."""
    targets: dict[str, Target] = {}
    for layer in range(config.num_layers):
        targets |= layer_targets(layout, layer)
    return targets


def module_names(layout: DecoderLayout) -> list[str]:
    """The module names a PEFT ``target_modules`` list may use for this layout (``q_proj``, ``qkv_proj``, ...)."""
    return [name.rpartition(".")[2] for name in layer_targets(layout, 0)]
