"""LoRA adapters: what a host hands a model, and how a model serves many of them in one batch.

A LoRA adapter changes some linear layers of a base model, ``W x`` becoming
``W x + scale * B (A x)`` with a shrink matrix ``A [rank, in]`` and an expand matrix ``B [out, rank]``
per adapted weight (its *target*). A model that serves adapters (see
:class:`~pyagent_core.interfaces.model.CausalLM`) keeps a fixed number of them loaded in *slots*
(:class:`LoRASettings`: ``max_loras`` slots of rank up to ``max_lora_rank``, the names of vLLM's
flags), and each forward says per token row which slot it uses, or none: one step carries sequences
of different adapters and of the base model. A host decides which adapter sits in which slot (and
evicts one to make room); the model only loads, unloads and applies.

The records here hold tensors as ``Any``: this module imports no torch.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs


def _positive(_instance: object, attribute: attrs.Attribute[int], value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{attribute.name} must be a positive integer, got {value!r}")


@attrs.frozen
class LoRASettings:
    """How many adapters a model keeps loaded at once, and how large.

    Attributes:
        max_loras: the number of slots (vLLM's ``--max-loras``); a step's rows use at most this many
            different adapters.
        max_lora_rank: the largest rank a slot holds (vLLM's ``--max-lora-rank``); an adapter of a
            higher rank is refused when it is loaded.
    """

    max_loras: int = attrs.field(validator=_positive)
    max_lora_rank: int = attrs.field(validator=_positive)


@attrs.frozen(eq=False)
class LoRAWeight:
    """One adapted weight of an adapter.

    Attributes:
        a: the shrink matrix, a float tensor ``[rank, in_features]``.
        b: the expand matrix, a float tensor ``[out_features, rank]``, rows in the order of the base
            weight's Hugging Face rows.
        scale: what ``B (A x)`` is multiplied by: ``lora_alpha / rank``, or ``lora_alpha / sqrt(rank)``
            for rsLoRA.
    """

    a: Any
    b: Any
    scale: float

    @property
    def rank(self) -> int:
        """The rank: rows of ``a``."""
        return int(self.a.shape[0])


@attrs.frozen(eq=False)
class LoRAAdapter:
    """A LoRA adapter read for one base model, ready to be loaded into a slot.

    Attributes:
        name: what it is called (by default its folder or file name).
        source: the folder or file it was read from.
        format: ``"peft"`` (a PEFT folder) or ``"gguf"`` (a llama.cpp LoRA GGUF file).
        weights: Hugging Face name of an adapted base weight (``model.layers.0.self_attn.q_proj.weight``)
            -> its :class:`LoRAWeight`; only names of the model's
            :meth:`~pyagent_core.interfaces.model.CausalLM.lora_targets`, with shapes that fit them.
    """

    name: str
    source: str
    format: str
    weights: Mapping[str, LoRAWeight]

    @property
    def rank(self) -> int:
        """The largest rank of its weights (what ``max_lora_rank`` must hold)."""
        return max((weight.rank for weight in self.weights.values()), default=0)
