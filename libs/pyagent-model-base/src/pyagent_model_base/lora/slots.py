"""A model's LoRA slots, and the batched LoRA calls a step plan runs after the products they adapt.

:class:`LoRASlots` keeps, for every adaptable product of every layer (``qkv``, ``o_proj``,
``gate_up``, ``down``), a :class:`~pyagent_kernels.lora.LoRAStack` of ``max_loras`` slots; loading an
adapter copies each of its weights into its slice of its product's stack, unloading marks the slot
empty. A step whose rows use adapters runs the base model's plan with one
:func:`~pyagent_kernels.lora.prepare_lora` call after each linear call of an adapted product (only
the products some loaded adapter adapts), reading that step's slot per row from one buffer: the
base product stays the linear kernel's (quantized blocks included, the QLoRA case) and the delta is
added to its output before anything reads it (bias, q/k norms, RoPE, SwiGLU, the residual).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from pyagent_core.errors import LoRAAdapterError
from pyagent_core.interfaces.lora import LoRAAdapter, LoRASettings
from pyagent_core.interfaces.model import ModelConfig
from pyagent_kernels import PreparedCall
from pyagent_kernels.lora import LoRAStack, prepare_lora
from pyagent_model_base.layout import DecoderLayout
from pyagent_model_base.lora.targets import PROJECTIONS, Target, decoder_targets
from pyagent_model_base.step_plan import LayerWeights, StepPlan


class LoRASlots:
    """The adapters a model holds in ``settings.max_loras`` slots, as one stack per adaptable product.

    Args:
        layout: the decoder's layout (which weights make up each product).
        config: the model's config.
        shapes: Hugging Face weight name -> shape, of every weight of the model.
        settings: the slots.
        dtype: the model's working dtype (the stacks hold the adapters in it).
    """

    def __init__(self, layout: DecoderLayout, config: ModelConfig, shapes: dict[str, tuple[int, ...]],
                 settings: LoRASettings, dtype: torch.dtype) -> None:
        self.settings = settings
        self.targets: dict[str, Target] = {name: target for name, target in decoder_targets(layout, config).items()
                                           if name in shapes}
        sizes: dict[tuple[int, str], list[tuple[int, int]]] = {}
        for name, target in self.targets.items():
            sizes.setdefault((target.layer, target.projection), []).append((target.index, shapes[name][0]))
        inputs = {name: shapes[name][1] for name in self.targets}
        first_input = {(t.layer, t.projection): inputs[name] for name, t in self.targets.items() if t.index == 0}
        self.stacks: dict[tuple[int, str], LoRAStack] = {
            key: LoRAStack(settings.max_loras, settings.max_lora_rank, first_input[key],
                           [rows for _, rows in sorted(parts)], dtype)
            for key, parts in sizes.items()
        }
        self.adapters: list[LoRAAdapter | None] = [None] * settings.max_loras
        #: Bumped by every load and unload, so cached plans know when the adapted products change.
        self.version = 0

    def _check_slot(self, slot: int) -> None:
        if isinstance(slot, bool) or not isinstance(slot, int) or not 0 <= slot < self.settings.max_loras:
            raise LoRAAdapterError(f"LoRA slot {slot!r} is outside [0, {self.settings.max_loras}) (max_loras = "
                                   f"{self.settings.max_loras})")

    def load(self, slot: int, adapter: LoRAAdapter) -> None:
        """Put ``adapter`` into ``slot`` (see :meth:`~pyagent_core.interfaces.model.CausalLM.load_lora`)."""
        self._check_slot(slot)
        if adapter.rank > self.settings.max_lora_rank:
            raise LoRAAdapterError(f"LoRA adapter {adapter.name!r} has rank {adapter.rank}, above max_lora_rank = "
                                   f"{self.settings.max_lora_rank}; raise max_lora_rank (--max-lora-rank) to at "
                                   f"least {adapter.rank}")
        for name, weight in adapter.weights.items():
            target = self.targets.get(name)
            if target is None:
                raise LoRAAdapterError(f"LoRA adapter {adapter.name!r} adapts {name}, which this model does not "
                                       "adapt; read the adapter with this model's read_lora")
            if not math.isfinite(weight.scale):
                raise LoRAAdapterError(f"LoRA adapter {adapter.name!r}: {name} has scale {weight.scale}; a scale must "
                                       "be finite")
            stack = self.stacks[target.layer, target.projection]
            begin, end = stack.starts[target.index : target.index + 2].tolist()
            if tuple(weight.a.shape) != (weight.rank, stack.in_features) or tuple(weight.b.shape) != (end - begin,
                                                                                                 weight.rank):
                raise LoRAAdapterError(
                    f"LoRA adapter {adapter.name!r}: {name} has A {list(weight.a.shape)} and B {list(weight.b.shape)}, "
                    f"which do not fit this model's [{end - begin}, {stack.in_features}] weight; read the adapter with "
                    "this model's read_lora"
                )
        for stack in self.stacks.values():  # everything is checked: nothing below raises
            stack.clear(slot)
        for name, weight in adapter.weights.items():
            target = self.targets[name]
            self.stacks[target.layer, target.projection].load(slot, target.index, weight.a, weight.b, weight.scale)
        self.adapters[slot] = adapter
        self.version += 1

    def unload(self, slot: int) -> None:
        """Empty ``slot``."""
        self._check_slot(slot)
        for stack in self.stacks.values():
            stack.clear(slot)
        self.adapters[slot] = None
        self.version += 1

    def step_slots(self, lora_slots: torch.Tensor, tokens: int) -> torch.Tensor | None:
        """``lora_slots`` as int32, or ``None`` when no row uses an adapter; :class:`LoRAAdapterError` for a
        slot out of range or empty, ``ValueError`` for a tensor of the wrong shape or dtype."""
        if lora_slots.shape != (tokens,) or lora_slots.dtype not in (torch.int32, torch.int64):
            raise ValueError(f"lora_slots must be int32 or int64 [num_tokens = {tokens}]; got {lora_slots.dtype} "
                             f"{list(lora_slots.shape)}")
        slots = lora_slots.to(torch.int32)
        used = slots[slots != -1]
        if not len(used):
            return None
        bad = (used < 0) | (used >= self.settings.max_loras)
        if bad.any():
            raise LoRAAdapterError(f"lora_slots holds {int(used[bad][0])}, outside -1 (the base model) and the slots "
                                   f"0 .. {self.settings.max_loras - 1}")
        for slot in used.unique().tolist():
            if self.adapters[slot] is None:
                raise LoRAAdapterError(f"lora_slots names slot {slot}, which holds no adapter; load one there first "
                                       "(load_lora)")
        return slots

    def adapted(self) -> set[tuple[int, str]]:
        """The (layer, product) pairs some loaded adapter adapts."""
        return {(target.layer, target.projection) for adapter in self.adapters if adapter is not None
                for target in (self.targets[name] for name in adapter.weights)}

    def weave(self, plan: StepPlan, layers: Sequence[LayerWeights], slots: torch.Tensor) -> None:
        """Insert into ``plan.calls`` a LoRA call after the linear call of every adapted product, reading
        the step's slot per row from ``slots`` (int32 ``[tokens]``).

        The linear calls are recognized by their weight (``PreparedCall.tensors`` of
        :func:`~pyagent_kernels.linear.prepare_linear`: ``(x, weight, out)``); an adapted product whose
        call is not found is a ``RuntimeError`` rather than a step that silently drops its adapter.
        """
        adapted = self.adapted()
        threads = plan.threads
        calls = []
        for index, (layer, stages) in enumerate(zip(layers, plan.calls, strict=True)):
            weights = {id(getattr(layer, projection)): projection for projection in PROJECTIONS
                       if (index, projection) in adapted}
            found: set[str] = set()
            woven: list[tuple[PreparedCall, ...]] = []
            for stage in stages:
                stage_calls: list[PreparedCall] = []
                for call in stage:
                    stage_calls.append(call)
                    projection = weights.get(id(call.tensors[1])) if call.kernel == "linear" else None
                    if projection is not None and projection not in found:
                        found.add(projection)
                        x, _, out = call.tensors[:3]
                        stage_calls.append(prepare_lora(x, out, slots, self.stacks[index, projection],
                                                        threads=threads))
                woven.append(tuple(stage_calls))
            if found != set(weights.values()):
                raise RuntimeError(f"layer {index}: the step plan has no linear call for the adapted products "
                                   f"{sorted(set(weights.values()) - found)}")
            before, after = woven
            calls.append((before, after))
        plan.calls = calls
