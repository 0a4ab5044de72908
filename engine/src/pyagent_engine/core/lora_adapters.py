"""The LoRA adapters an engine serves: registered by name, read once, loaded into the model's slots on demand.

Registering an adapter (:meth:`ServedAdapters.add`: ``LLM(lora_modules=...)``, ``pyagent serve
--lora-modules``, ``POST /v1/load_lora_adapter``, or the first request naming a new
:class:`~pyagent_engine.requests.lora.LoRARequest` with a path) reads and checks it for the model
right away, so a bad adapter is refused before any request uses it, and keeps it in host memory. It
reaches a slot of the model only when a request using it is admitted
(:class:`~pyagent_engine.scheduling.lora_slots.LoRASlotTable`).
"""

from __future__ import annotations

import itertools
from typing import Any

from pyagent_core.errors import LoRAAdapterError, UnknownLoRAAdapterError
from pyagent_core.interfaces.lora import LoRASettings
from pyagent_core.interfaces.model import ModelConfig
from pyagent_engine.requests.lora import LoRARequest, ServedAdapter
from pyagent_engine.scheduling.lora_slots import LoRASlotTable


class ServedAdapters:
    """The adapters served by name, and the model's slots.

    Args:
        model: the model (its ``enable_lora`` is called here; it raises
            :class:`~pyagent_core.errors.LoRAAdapterError` for an architecture that serves no adapters).
        config: the model's config (adapters are read for it).
        settings: the slots: how many adapters at once, of what largest rank.
    """

    def __init__(self, model: Any, config: ModelConfig, settings: LoRASettings) -> None:
        model.enable_lora(settings)
        self.model = model
        self.config = config
        self.settings = settings
        self.by_name: dict[str, ServedAdapter] = {}
        self._serials = itertools.count(1)
        self.slots = LoRASlotTable(settings.max_loras, lambda slot, served: model.load_lora(slot, served.adapter),
                                   model.unload_lora)

    def add(self, lora_request: LoRARequest) -> ServedAdapter:
        """Read and register the adapter of ``lora_request`` (the registered one when its name, id and
        path are those already registered).

        Raises:
            LoRAAdapterError: no path, the file is not an adapter of this model or its rank exceeds
                ``max_lora_rank``, or the name or id is taken by another adapter.
        """
        known = self.by_name.get(lora_request.lora_name)
        if known is not None:
            if lora_request.lora_path in ("", known.request.lora_path) and \
                    lora_request.lora_int_id == known.request.lora_int_id:
                return known
            raise LoRAAdapterError(f"a LoRA adapter named {lora_request.lora_name!r} is already loaded (from "
                                   f"{known.request.lora_path}, id {known.request.lora_int_id}); unload it first or "
                                   "give the new one another name")
        same_id = next((s for s in self.by_name.values() if s.request.lora_int_id == lora_request.lora_int_id), None)
        if same_id is not None:
            raise LoRAAdapterError(f"lora_int_id {lora_request.lora_int_id} already belongs to LoRA adapter "
                                   f"{same_id.name!r}; give each adapter its own id")
        if not lora_request.lora_path:
            raise UnknownLoRAAdapterError(f"the LoRA adapter {lora_request.lora_name!r} is not loaded and the "
                                          f"request gives no lora_path to read it from; loaded: {self.names or 'none'}")
        adapter = type(self.model).read_lora(lora_request.lora_path, self.config, name=lora_request.lora_name)
        if adapter.rank > self.settings.max_lora_rank:
            raise LoRAAdapterError(f"{lora_request.lora_path}: the LoRA adapter has rank {adapter.rank} but the "
                                   f"engine's slots hold rank {self.settings.max_lora_rank}; raise max_lora_rank "
                                   f"(--max-lora-rank) to at least {adapter.rank}")
        served = ServedAdapter(lora_request, adapter, next(self._serials))
        self.by_name[served.name] = served
        return served

    def remove(self, name: str) -> ServedAdapter:
        """Stop serving adapter ``name``: new requests cannot use it; requests already using it finish with
        it, and its slot empties after them. Raises :class:`UnknownLoRAAdapterError` when none has that name."""
        served = self.by_name.pop(name, None)
        if served is None:
            raise UnknownLoRAAdapterError(f"the LoRA adapter {name!r} is not loaded; loaded: {self.names or 'none'}")
        self.slots.forget(served)
        return served

    @property
    def names(self) -> str:
        """The registered names, comma-separated (for messages)."""
        return ", ".join(self.by_name)
