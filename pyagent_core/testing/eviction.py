"""Conformance kit for eviction policies: a hypothesis state machine against a set model.

The model is the set of ids the policy should hold. Every rule applies one operation to both and
checks the outcome: misuse raises :class:`~pyagent_core.errors.EvictionError`, ``evict`` returns a
member of the set, and ``len``/``in`` agree with the set after every step. Which member ``evict``
picks is the policy's business; the kit checks only that it is a legal one. Inserts come both bare
and through ``insert_with_info`` (with and without a :class:`BlockInfo`), and absent ids are
forgotten at random, as pools that recycle ids do. The kit builds each policy as
``impl(options, EvictionContext(capacity, block_size))``, the one constructor shape of the kind.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

from hypothesis import strategies as st
from hypothesis.stateful import Bundle, RuleBasedStateMachine, invariant, rule, run_state_machine_as_test

from pyagent_core.errors import EvictionError
from pyagent_core.interfaces.eviction import BlockInfo, EvictionContext, EvictionPolicy
from pyagent_core.testing.base import BackendConformance
from pyagent_core.testing.support import expect_raises, kit_settings

ID_SPACE = 16
"""Block ids in play are ``0 .. ID_SPACE - 1``: few enough that inserts, hits and misses all happen."""


class EvictionMachine(RuleBasedStateMachine):
    """Drives one policy and a brute-force set model side by side; ``kit`` builds the policy."""

    kit: ClassVar[EvictionConformance]

    def __init__(self) -> None:
        super().__init__()
        self.policy = self.kit.make_policy()
        self.model: set[int] = set()

    block_ids = st.integers(min_value=0, max_value=ID_SPACE - 1)
    inserted = Bundle("inserted")
    known_ids = st.one_of(inserted, block_ids)
    infos = st.one_of(st.none(), st.builds(
        BlockInfo, depth=st.integers(0, 300), tokens=st.integers(1, 512),
        parent=st.one_of(st.none(), block_ids),
    ))

    @rule(target=inserted, block_id=block_ids, info=st.one_of(st.just("bare"), infos))
    def insert(self, block_id: int, info: BlockInfo | str | None) -> int:
        """Insert (bare or with info); an id already present, or any id when full, must raise."""
        def call() -> None:
            if isinstance(info, BlockInfo) or info is None:
                self.policy.insert_with_info(block_id, info)
            else:
                self.policy.insert(block_id)

        if block_id in self.model or len(self.model) >= self.policy.capacity:
            expect_raises(EvictionError, call,
                          what=f"insert({block_id}, {info}) with {sorted(self.model)} present, capacity "
                               f"{self.policy.capacity}")
        else:
            call()
            self.model.add(block_id)
        return block_id

    @rule(block_id=known_ids)
    def forget(self, block_id: int) -> None:
        """Forget; a present id must raise (and stay present), an absent one is accepted."""
        if block_id in self.model:
            expect_raises(EvictionError, self.policy.forget, block_id,
                          what=f"forget({block_id}) of a present id")
        else:
            self.policy.forget(block_id)

    @rule(block_id=known_ids)
    def touch(self, block_id: int) -> None:
        """Touch; an absent id must raise."""
        self._present_or_raise(self.policy.touch, block_id, "touch")

    @rule(block_id=known_ids)
    def remove(self, block_id: int) -> None:
        """Remove; an absent id must raise."""
        self._present_or_raise(self.policy.remove, block_id, "remove")
        self.model.discard(block_id)

    def _present_or_raise(self, operation: Callable[[int], None], block_id: int, name: str) -> None:
        if block_id in self.model:
            operation(block_id)
        else:
            expect_raises(EvictionError, operation, block_id,
                          what=f"{name}({block_id}) of an absent id (present: {sorted(self.model)})")

    @rule()
    def evict(self) -> None:
        """Evict; the victim is a present id (then absent); an empty policy must raise."""
        if not self.model:
            expect_raises(EvictionError, self.policy.evict, what="evict() on an empty policy")
            return
        victim = self.policy.evict()
        assert victim in self.model, f"evict() returned {victim!r}, not one of {sorted(self.model)}"
        self.model.remove(victim)

    @rule()
    def drain(self) -> None:
        """Evicting until empty returns every present id exactly once."""
        victims = [self.policy.evict() for _ in range(len(self.model))]
        assert sorted(victims) == sorted(self.model), (
            f"draining returned {victims}, expected each of {sorted(self.model)} once"
        )
        self.model.clear()

    @invariant()
    def agrees_with_model(self) -> None:
        """``len`` and ``in`` match the set model for every id in play."""
        assert len(self.policy) == len(self.model), (
            f"len(policy) is {len(self.policy)}, expected {len(self.model)} ({sorted(self.model)})"
        )
        wrong = [i for i in range(ID_SPACE) if (i in self.policy) != (i in self.model)]
        assert not wrong, f"'in' disagrees for ids {wrong}; present: {sorted(self.model)}"


class EvictionConformance(BackendConformance):
    """Kit for :class:`EvictionPolicy` s. Set ``impl`` and ``spec``; ``capacity`` and ``block_size``
    make the :class:`EvictionContext` the policies are built with.

    Misuse raises :class:`EvictionError`: evicting when empty, inserting a present id or beyond
    capacity, touching or removing an id that is absent. A context with a non-positive capacity or
    block size cannot be made (``ValueError``).
    """

    kind = "eviction"
    capacity: ClassVar[int] = 6
    block_size: ClassVar[int] = 16
    max_examples: ClassVar[int] = 150

    def make_context(self, capacity: int | None = None) -> EvictionContext:
        """The context of a policy holding ``capacity`` ids (default: the class's ``capacity``)."""
        return EvictionContext(capacity=self.capacity if capacity is None else capacity,
                               block_size=self.block_size)

    def make_policy(self, capacity: int | None = None) -> EvictionPolicy:
        """Construct the policy under test (override to pass extra setup)."""
        policy: EvictionPolicy = self.impl(self.make_options(), self.make_context(capacity))
        return policy

    def test_state_machine(self) -> None:
        machine: Any = type("Machine", (EvictionMachine,), {"kit": self})
        run_state_machine_as_test(machine, settings=kit_settings(self.max_examples))

    def test_evict_on_empty_raises(self) -> None:
        policy = self.make_policy()
        expect_raises(EvictionError, policy.evict, what="evict() on a new policy")
        policy.insert(3)
        assert policy.evict() == 3
        expect_raises(EvictionError, policy.evict, what="evict() after evicting the only id")

    def test_unknown_ids_raise(self) -> None:
        policy = self.make_policy()
        policy.insert(1)
        policy.remove(1)
        expect_raises(EvictionError, policy.touch, 1, what="touch() of a removed id")
        expect_raises(EvictionError, policy.remove, 1, what="remove() of a removed id")
        expect_raises(EvictionError, policy.touch, 7, what="touch() of a never inserted id")

    def test_duplicate_and_overfull_insert_raise(self) -> None:
        policy = self.make_policy(2)
        policy.insert(5)
        expect_raises(EvictionError, policy.insert, 5, what="insert() of a present id")
        policy.insert(6)
        expect_raises(EvictionError, policy.insert, 7, what="insert() into a full policy")
        assert len(policy) == 2 and 7 not in policy

    def test_single_id_is_the_victim(self) -> None:
        policy = self.make_policy()
        for block_id in range(self.capacity):
            policy.insert(block_id)
        for block_id in range(self.capacity - 1):
            policy.remove(block_id)
        assert policy.evict() == self.capacity - 1

    def test_keeps_options_and_context(self) -> None:
        options, context = self.make_options(), self.make_context(3)
        policy = self.impl(options, context)
        assert policy.options == options and policy.context is context and policy.capacity == 3, (
            f"{self.impl.__name__}(options, context) kept options={policy.options!r}, "
            f"context={policy.context!r}, capacity={policy.capacity!r}; pass both to EvictionPolicy.__init__"
        )
        history = policy.history
        assert isinstance(history, int) and not isinstance(history, bool) and history >= 0, (
            f"history must be a number of ids >= 0, got {history!r}"
        )

    def test_non_positive_capacity_raises(self) -> None:
        expect_raises(ValueError, self.make_policy, -1, what="capacity=-1")
        expect_raises(ValueError, self.make_policy, 0, what="capacity=0")
