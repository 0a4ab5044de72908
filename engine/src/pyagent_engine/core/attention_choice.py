"""Choosing and building the attention backend: the one the user named, or the best one that runs.

A backend the user chose (the ``attention`` argument or ``--attention``, ``PYAGENT_ATTENTION``, a
config file) that cannot run here (it does not support the model, or its implementation fails to
import or to construct) is a :class:`BackendUnavailableError` naming it and saying why. When nobody
chose one, the available backends are tried by priority (the registry's default first) and each
that cannot run is skipped with an :class:`AttentionFallbackWarning` naming it and the reason.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping
from typing import Any

import attrs

from pyagent_core.errors import BackendUnavailableError, NoBackendError, PyagentError
from pyagent_core.interfaces.attention import AttentionBackend, AttentionContext
from pyagent_core.kinds import ATTENTION
from pyagent_core.registry import Registry, Selection
from pyagent_core.types import AttentionSpec
from pyagent_engine.requests.isolation import describe

#: ``unsupported(spec)``: why the model cannot run on a backend (``None``: it can).
Unsupported = Callable[[AttentionSpec], str | None]


class AttentionFallbackWarning(UserWarning):
    """The default attention backend cannot run here; the next available one is used instead."""


def _build(registry: Registry, selection: Selection[AttentionSpec], context: AttentionContext,
           unsupported: Unsupported) -> AttentionBackend | str:
    """The backend instance, or why it cannot run."""
    problem = unsupported(selection.backend.spec)
    if problem is not None:
        return problem
    try:
        backend: AttentionBackend = registry.load(selection.backend)(selection.options, context)
    except Exception as error:
        return f"its implementation {selection.backend.spec.impl!r} failed to load: {describe(error)}"
    return backend


def build_attention(registry: Registry, name: str | None, options: Mapping[str, Any] | None,
                    context: AttentionContext,
                    unsupported: Unsupported) -> tuple[Selection[AttentionSpec], AttentionBackend]:
    """Select the attention backend (see the module docstring) and construct it with ``context``."""
    selection = registry.select(ATTENTION, name, options)
    if not selection.source.startswith("default"):
        named = _build(registry, selection, context, unsupported)
        if isinstance(named, str):
            raise BackendUnavailableError(ATTENTION.name, selection.backend.name, named,
                                          [b.name for b in registry.available(ATTENTION)])
        return selection, named
    skipped: list[tuple[str, str]] = []
    ranked = sorted(registry.available(ATTENTION), key=lambda b: (-b.spec.priority, b.name, b.dist or ""))
    for candidate in [selection.backend, *(b for b in ranked if b is not selection.backend)]:
        try:
            chosen = selection if candidate is selection.backend else attrs.evolve(
                registry.select(ATTENTION, candidate.qualified_name, options),
                source=f"fallback (priority {candidate.spec.priority})")
        except PyagentError as error:
            built: AttentionBackend | str = str(error)
        else:
            built = _build(registry, chosen, context, unsupported)
        if isinstance(built, str):
            skipped.append((candidate.name, built))
            continue
        if skipped:
            reasons = "; ".join(f"{skipped_name!r} cannot run: {why}" for skipped_name, why in skipped)
            warnings.warn(f"attention backend {reasons}; using {candidate.name!r} instead",
                          AttentionFallbackWarning, stacklevel=3)
        return chosen, built
    raise NoBackendError(ATTENTION.name, skipped)
