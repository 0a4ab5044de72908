"""Which LoRA adapter a request runs with: vLLM's :class:`LoRARequest`, and the adapter the engine read for it.

A request names its adapter with a :class:`LoRARequest` (``lora_name``, ``lora_int_id``, ``lora_path``:
vLLM's fields and order, so scripts carry over). The engine reads the adapter once per name
(:meth:`~pyagent_engine.core.engine.Engine.add_lora`) into a :class:`ServedAdapter`, whose
:attr:`~ServedAdapter.cache_key` is mixed into the request's prefix-cache hashes: no cached block is
shared between adapters, nor between an adapter and the base model, nor between two adapters that
were registered under one name one after the other.
"""

from __future__ import annotations

import attrs

from pyagent_core.errors import LoRAAdapterError
from pyagent_core.interfaces.lora import LoRAAdapter


def _check_name(_instance: object, _attribute: attrs.Attribute[str], value: str) -> None:
    if not isinstance(value, str) or not value.strip():
        raise LoRAAdapterError(f"lora_name must be a non-empty string, got {value!r}")


def _check_id(_instance: object, _attribute: attrs.Attribute[int], value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise LoRAAdapterError(f"lora_int_id must be an integer >= 1 (vLLM's rule: 0 is the base model), "
                               f"got {value!r}")


@attrs.frozen
class LoRARequest:
    """A request for a LoRA adapter, as vLLM's ``vllm.lora.request.LoRARequest``.

    Attributes:
        lora_name: the adapter's name (what the server's ``model`` field and ``/v1/models`` call it).
        lora_int_id: a positive integer unique to the adapter.
        lora_path: the PEFT folder or llama.cpp LoRA GGUF file to read it from (may be empty when the
            name is already registered with the engine).
    """

    lora_name: str = attrs.field(validator=_check_name)
    lora_int_id: int = attrs.field(validator=_check_id)
    lora_path: str = attrs.field(default="", converter=str)


@attrs.frozen(eq=False)
class ServedAdapter:
    """An adapter the engine serves: the request that registered it and the adapter read for the model.

    Attributes:
        request: the :class:`LoRARequest` it was registered with.
        adapter: the adapter, read and checked for the engine's model.
        serial: the engine's registration count when it was registered (unique per engine).
    """

    request: LoRARequest
    adapter: LoRAAdapter
    serial: int

    @property
    def name(self) -> str:
        """The adapter's name."""
        return self.request.lora_name

    @property
    def cache_key(self) -> str:
        """What the request's prefix-cache hashes carry for this adapter: its name and registration serial."""
        return f"{self.name}#{self.serial}"
