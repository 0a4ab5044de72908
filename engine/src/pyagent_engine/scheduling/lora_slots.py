"""The model's LoRA slots as the scheduler hands them out: pinned while used, least recently used evicted.

The model keeps ``max_loras`` adapters loaded (vLLM's ``--max-loras``). A request running with an
adapter pins the slot holding it; when a waiting request's adapter is in no slot, the scheduler
admits it only if a slot is empty or holds an adapter no running request uses, and the least
recently used such slot is reloaded with it (vLLM's LRU cache of active adapters). Otherwise the
request waits, and the scheduler goes on with the requests behind it: a step never uses more
adapters than there are slots, and no request fails for want of one.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable

from pyagent_engine.requests.lora import ServedAdapter
from pyagent_engine.requests.request import Request


class LoRASlotTable:
    """Which adapter each of the model's slots holds, how many running requests use it, and when it was last used.

    Args:
        max_loras: the number of slots.
        load: ``load(slot, adapter)`` puts an adapter into a slot of the model (replacing what is there).
        unload: ``unload(slot)`` empties a slot of the model.
    """

    def __init__(self, max_loras: int, load: Callable[[int, ServedAdapter], None],
                 unload: Callable[[int], None]) -> None:
        self.held: list[ServedAdapter | None] = [None] * max_loras
        self.users = [0] * max_loras
        self._used = [0] * max_loras
        self._clock = itertools.count(1)
        self._load = load
        self._unload = unload
        self._retired: set[int] = set()  # slots whose adapter was unregistered while in use
        self.num_loads = 0
        """Adapters loaded into a slot so far (an eviction is a load into a slot that held another)."""
        self.num_evictions = 0
        """Loads that replaced another adapter."""

    def _slot_of(self, adapter: ServedAdapter) -> int | None:
        return next((slot for slot, held in enumerate(self.held) if held is adapter), None)

    def _free_slot(self) -> int | None:
        """An empty slot, else the least recently used slot nobody uses (``None``: every slot is in use)."""
        empty = [slot for slot, held in enumerate(self.held) if held is None]
        if empty:
            return empty[0]
        idle = [slot for slot, users in enumerate(self.users) if users == 0]
        return min(idle, key=self._used.__getitem__, default=None)

    def available(self, request: Request) -> bool:
        """True when ``request`` can get its adapter's slot now (always for the base model)."""
        adapter = request.lora
        return adapter is None or self._slot_of(adapter) is not None or self._free_slot() is not None

    def acquire(self, request: Request) -> None:
        """Pin the slot of ``request``'s adapter, loading it into a free or least recently used one when
        it is in none, and set ``request.lora_slot``; the caller checked :meth:`available`."""
        adapter = request.lora
        if adapter is None:
            return
        slot = self._slot_of(adapter)
        if slot is None:
            slot = self._free_slot()
            if slot is None:
                raise RuntimeError(f"no LoRA slot is free for adapter {adapter.name!r}: check available() first")
            self._retired.discard(slot)
            self.num_evictions += self.held[slot] is not None
            self._load(slot, adapter)
            self.held[slot] = adapter
            self.num_loads += 1
        self.users[slot] += 1
        self._used[slot] = next(self._clock)
        request.lora_slot = slot

    def release(self, request: Request) -> None:
        """Unpin ``request``'s slot (finished or preempted); an unregistered adapter leaves its slot with its
        last user."""
        slot = request.lora_slot
        if slot < 0:
            return
        request.lora_slot = -1
        self.users[slot] -= 1
        self._used[slot] = next(self._clock)
        if slot in self._retired and self.users[slot] == 0:
            self._empty(slot)

    def forget(self, adapter: ServedAdapter) -> None:
        """``adapter`` is no longer served: empty its slot now, or once the requests using it are done."""
        slot = self._slot_of(adapter)
        if slot is None:
            return
        if self.users[slot]:
            self._retired.add(slot)
        else:
            self._empty(slot)

    def _empty(self, slot: int) -> None:
        self._retired.discard(slot)
        self._unload(slot)
        self.held[slot] = None

    @property
    def loaded(self) -> list[str]:
        """Names of the adapters in the slots, in slot order."""
        return [adapter.name for adapter in self.held if adapter is not None]
