"""Grammar backends for testing the orchestration: a fast choice backend and variants that refuse, break,
allow nothing, or wait for a gate before compiling.

Loaded by ``conftest.py`` as the module ``pyagent_test_grammar_doubles`` (so the specs' ``impl`` paths
resolve) and registered through :data:`PLUGIN`, next to the installed plugins.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from typing import Any

import torch

from pyagent_core import GrammarSpec, hookimpl
from pyagent_core.interfaces.grammar import (
    CompiledGrammar,
    ConstraintSpec,
    GrammarBackend,
    GrammarContext,
    GrammarMatcher,
    TokenizerInfo,
    set_row,
)

MODULE = "pyagent_test_grammar_doubles"
GATE = threading.Event()
"""``test-gated`` compiles only once this is set (tests set and clear it)."""
COMPILES: dict[str, int] = {}
"""How many times each double's ``compile`` ran, by backend name."""


def _longest_common_prefix(items: list[bytes]) -> bytes:
    first, last = min(items), max(items)
    size = next((i for i, (a, b) in enumerate(zip(first, last, strict=False)) if a != b), len(first))
    return first[:size]


class PrefixChoiceMatcher(GrammarMatcher):
    """Choice matcher that looks tokens up by the prefixes of the remaining text (fast on big vocabularies)."""

    def __init__(self, compiled: PrefixChoiceGrammar) -> None:
        self.compiled = compiled
        self.tokens: list[int] = []
        self.text = b""
        self.terminated = False

    def allowed(self) -> set[int]:
        """Token ids that may come next."""
        if self.terminated:
            return set()
        by_bytes = self.compiled.by_bytes
        allowed: set[int] = set()
        for choice in self.compiled.choices:
            if not choice.startswith(self.text):
                continue
            rest = choice[len(self.text):]
            if not rest:
                allowed.update(self.compiled.info.eos_token_ids)
            for size in range(1, min(len(rest), self.compiled.longest) + 1):
                allowed.update(by_bytes.get(rest[:size], ()))
        return allowed

    def accept_token(self, token_id: int) -> bool:
        if token_id not in self.allowed():
            return False
        self.tokens.append(token_id)
        if token_id in self.compiled.info.eos_token_ids:
            self.terminated = True
        else:
            self.text += self.compiled.info.vocab[token_id]
        return True

    def fill_bitmask(self, bitmask: torch.Tensor, row: int) -> None:
        set_row(bitmask, row, self.allowed())

    def rollback(self, num_tokens: int) -> None:
        if num_tokens > len(self.tokens):
            raise ValueError(f"cannot roll back {num_tokens} tokens, {len(self.tokens)} accepted")
        kept = self.tokens[: len(self.tokens) - num_tokens]
        self.reset()
        for token in kept:
            self.accept_token(token)

    def is_terminated(self) -> bool:
        return self.terminated

    def reset(self) -> None:
        self.tokens, self.text, self.terminated = [], b"", False

    def jump_forward(self) -> str:
        rests = [c[len(self.text):] for c in self.compiled.choices if c.startswith(self.text)]
        if self.terminated or not rests:
            return ""
        return _longest_common_prefix(rests).decode("utf-8", errors="ignore")


class PrefixChoiceGrammar(CompiledGrammar):
    """Choices as bytes plus a table from token bytes to ids (special tokens excluded)."""

    def __init__(self, info: TokenizerInfo, choices: tuple[str, ...]) -> None:
        self.info = info
        self.choices = [c.encode("utf-8") for c in choices]
        hidden = {*info.eos_token_ids, *info.special_token_ids}
        self.by_bytes: dict[bytes, list[int]] = {}
        for token_id, data in enumerate(info.vocab):
            if data and token_id not in hidden:
                self.by_bytes.setdefault(data, []).append(token_id)
        self.longest = max(map(len, self.by_bytes))

    def matcher(self) -> GrammarMatcher:
        return PrefixChoiceMatcher(self)


class PrefixChoiceBackend(GrammarBackend):
    """``test-choice``: choice constraints only."""

    name = "test-choice"

    def supports(self, constraint: ConstraintSpec) -> str | None:
        return None if constraint.kind == "choice" else f"only choice constraints, not {constraint.kind}"

    def compile(self, constraint: ConstraintSpec) -> CompiledGrammar:
        self.check_supported(constraint)
        COMPILES[self.name] = COMPILES.get(self.name, 0) + 1
        return PrefixChoiceGrammar(self.tokenizer_info, tuple(constraint.choice or ()))


class RefusingBackend(PrefixChoiceBackend):
    """``test-refuse``: declares JSON schemas and choices but refuses every constraint in ``supports``."""

    name = "test-refuse"

    def supports(self, constraint: ConstraintSpec) -> str | None:
        return "keyword 'x-test' is not implemented"


class BrokenBackend(PrefixChoiceBackend):
    """``test-broken``: its compile always fails."""

    name = "test-broken"

    def compile(self, constraint: ConstraintSpec) -> CompiledGrammar:
        raise ValueError("the test backend's compiler crashed")


class EmptyMatcher(PrefixChoiceMatcher):
    """Allows no token at all (an unsatisfiable constraint, as a backend would compile it)."""

    def allowed(self) -> set[int]:
        return set()


class EmptyBackend(PrefixChoiceBackend):
    """``test-empty``: compiles every choice constraint to a grammar that allows nothing."""

    name = "test-empty"

    def compile(self, constraint: ConstraintSpec) -> CompiledGrammar:
        compiled = super().compile(constraint)
        compiled.matcher = lambda: EmptyMatcher(compiled)  # type: ignore[method-assign,assignment]
        return compiled


class CrashingMatcher(PrefixChoiceMatcher):
    """Raises when asked for a mask (a backend bug surfacing mid-generation)."""

    def fill_bitmask(self, bitmask: torch.Tensor, row: int) -> None:
        raise RuntimeError("the test matcher's state is corrupt")


class CrashingBackend(PrefixChoiceBackend):
    """``test-crash``: compiles (its first-token check uses a sound matcher), but the matchers that requests
    get raise in ``fill_bitmask``."""

    name = "test-crash"

    def compile(self, constraint: ConstraintSpec) -> CompiledGrammar:
        compiled = super().compile(constraint)
        sound = compiled.matcher
        matchers = iter([sound()])  # the orchestrator's first-token check takes the first one
        compiled.matcher = lambda: next(matchers, None) or CrashingMatcher(compiled)  # type: ignore[method-assign]
        return compiled


class GatedBackend(PrefixChoiceBackend):
    """``test-gated``: compiling waits until :data:`GATE` is set (at most 60 s), like a slow compiler."""

    name = "test-gated"

    def compile(self, constraint: ConstraintSpec) -> CompiledGrammar:
        GATE.wait(timeout=60)
        return super().compile(constraint)


class FailingStartBackend(PrefixChoiceBackend):
    """``test-nostart``: its constructor raises (a backend that cannot start here)."""

    name = "test-nostart"

    def __init__(self, options: Mapping[str, Any], context: GrammarContext) -> None:
        raise RuntimeError("the test backend's native library is missing")


def _spec(impl: type[PrefixChoiceBackend], kinds: tuple[str, ...] = ("choice",)) -> GrammarSpec:
    return GrammarSpec(name=impl.name, impl=f"{MODULE}:{impl.__name__}", summary=impl.__doc__ or "",
                       constraint_kinds=kinds, rollback=True, jump_forward=True, priority=-100)


SPECS = {
    "test-choice": _spec(PrefixChoiceBackend),
    "test-refuse": _spec(RefusingBackend, ("json_schema", "choice")),
    "test-broken": _spec(BrokenBackend, ("json_schema", "choice")),
    "test-empty": _spec(EmptyBackend),
    "test-gated": _spec(GatedBackend),
    "test-crash": _spec(CrashingBackend),
    "test-nostart": _spec(FailingStartBackend),
}


class _Plugin:
    """Registers every double."""

    @staticmethod
    @hookimpl
    def pyagent_register_grammar_backends(register: Callable[[GrammarSpec], None]) -> None:
        for spec in SPECS.values():
            register(spec)


PLUGIN = _Plugin()
