"""The check every adapter format's matrices go through: does this adapted weight fit the model?"""

from __future__ import annotations

import re
from collections.abc import Mapping

import torch

from pyagent_core.errors import LoRAAdapterError
from pyagent_core.interfaces.lora import LoRAWeight
from pyagent_core.interfaces.model import ModelConfig

_LAYER = re.compile(r"^model\.layers\.(\d+)\.")


def beyond_last_layer(where: str, tensor: str, layer: int, config: ModelConfig) -> LoRAAdapterError:
    """The error for tensor ``tensor`` of ``where`` adapting layer ``layer`` of a model with fewer layers."""
    return LoRAAdapterError(
        f"{where}: tensor {tensor!r} adapts layer {layer}, but the model has {config.num_layers} layers: the "
        "adapter was made for another base model; use it with the model it was trained on"
    )


def lora_weight(base: str, a: torch.Tensor, b: torch.Tensor, scale: float, targets: Mapping[str, tuple[int, int]],
                config: ModelConfig, where: str, tensor: str) -> LoRAWeight:
    """The :class:`LoRAWeight` of base weight ``base`` (a Hugging Face name) with shrink ``a`` and expand
    ``b``, read from tensor ``tensor`` of ``where``; :class:`LoRAAdapterError` when ``base`` is not one of
    ``targets`` (name -> ``(out, in)``) or the shapes do not fit it."""
    if base not in targets:
        layer = _LAYER.match(base)
        if layer is not None and int(layer.group(1)) >= config.num_layers:
            raise beyond_last_layer(where, tensor, int(layer.group(1)), config)
        modules = sorted({name.rpartition(".weight")[0].rpartition(".")[2] for name in targets})
        raise LoRAAdapterError(
            f"{where}: tensor {tensor!r} adapts {base.removesuffix('.weight')!r}, which the {config.architecture} "
            f"model does not have or pyagent does not adapt (LoRA applies to {', '.join(modules)}); train the "
            "adapter on those modules, or use it with the model it was made for"
        )
    out_features, in_features = targets[base]
    if a.dim() != 2 or b.dim() != 2 or a.shape[0] != b.shape[1] or a.shape[0] < 1:
        raise LoRAAdapterError(
            f"{where}: tensor {tensor!r}: the shrink matrix A must be [rank, in] and the expand matrix B "
            f"[out, rank] with the same rank; got A {list(a.shape)} and B {list(b.shape)}"
        )
    if a.shape[1] != in_features or b.shape[0] != out_features:
        raise LoRAAdapterError(
            f"{where}: tensor {tensor!r} maps {a.shape[1]} inputs to {b.shape[0]} outputs, but {base} of this model "
            f"maps {in_features} to {out_features} (hidden size {config.hidden_size}): the adapter was made for "
            "another base model; use it with the model it was trained on"
        )
    if not (torch.isfinite(a).all() and torch.isfinite(b).all()):
        raise LoRAAdapterError(f"{where}: tensor {tensor!r} holds NaN or infinite values; the adapter is damaged")
    return LoRAWeight(a=a.float().contiguous(), b=b.float().contiguous(), scale=float(scale))
