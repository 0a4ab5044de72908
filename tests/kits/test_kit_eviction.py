"""Meta-tests of the eviction kit: the scaffold's OrderedDict LRU passes it, broken variants fail it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from pyagent_core.interfaces.eviction import EvictionContext, EvictionPolicy
from pyagent_core.testing.eviction import EvictionConformance
from pyagent_core.testing.scaffolded import import_template

reference = import_template("eviction")
LruPolicy = reference.impl.KitReference
# The scaffold's own conformance test, run here on the LRU policy it scaffolds.
TestLruPolicy = reference.tests.TestKitReference


class LazyRemoveLru(LruPolicy):
    """Broken: remove() forgets the id for ``in``/``len`` but leaves it queued for eviction."""

    def __init__(self, options: Mapping[str, Any], context: EvictionContext) -> None:
        super().__init__(options, context)
        self.removed: set[int] = set()

    def insert(self, block_id: int) -> None:
        self.check_insert(block_id)
        self.removed.discard(block_id)
        self.order[block_id] = None

    def remove(self, block_id: int) -> None:
        self.check_present(block_id)
        self.removed.add(block_id)

    def evict(self) -> int:
        self.check_not_empty()
        victim = self.order.popitem(last=False)[0]
        self.removed.discard(victim)
        return victim

    def __len__(self) -> int:
        return len(self.order) - len(self.removed)

    def __contains__(self, block_id: object) -> bool:
        return block_id in self.order and block_id not in self.removed


class SilentLru(LruPolicy):
    """Broken: evict() on an empty policy leaks a KeyError instead of an EvictionError."""

    def evict(self) -> int:
        return self.order.popitem(last=False)[0]


class UnboundedLru(LruPolicy):
    """Broken: ignores its capacity."""

    def insert(self, block_id: int) -> None:
        if block_id not in self.order:
            self.order[block_id] = None


class FixedSizeLru(LruPolicy):
    """Broken: sizes itself from a constant instead of its context."""

    def __init__(self, options: Mapping[str, Any], context: EvictionContext) -> None:
        super().__init__(options, EvictionContext(capacity=4, block_size=context.block_size))


def _kit(impl: type[EvictionPolicy]) -> EvictionConformance:
    return type(f"{impl.__name__}Kit", (TestLruPolicy,), {"impl": impl})()


@pytest.mark.parametrize(
    ("impl", "check"),
    [
        (LazyRemoveLru, "test_state_machine"),
        (SilentLru, "test_state_machine"),
        (SilentLru, "test_evict_on_empty_raises"),
        (UnboundedLru, "test_state_machine"),
        (UnboundedLru, "test_duplicate_and_overfull_insert_raise"),
        (FixedSizeLru, "test_keeps_options_and_context"),
    ],
)
def test_kit_catches_broken_policy(impl: type[EvictionPolicy], check: str) -> None:
    with pytest.raises(AssertionError):
        getattr(_kit(impl), check)()
