"""Choosing and building the mixer backend a model's forward calls beside attention.

A model names the mixer families its forward calls
(:meth:`~pyagent_core.interfaces.model.CausalLM.mixer_families`); an attention-only model names none
and gets no mixer. Otherwise the backend is the one the user named (the ``mixer`` argument,
``PYAGENT_MIXER``, a config file) or the registry's selection by priority; one that does not compute
every family the model calls, or not in the model's dtype, is a :class:`BackendUnavailableError`
naming it, what it lacks and the installed backends.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pyagent_core.errors import BackendUnavailableError
from pyagent_core.interfaces.mixer import MixerBackend, MixerContext
from pyagent_core.kinds import MIXER
from pyagent_core.registry import Registry, Selection
from pyagent_core.types import MixerSpec


def build_mixer(registry: Registry, families: Sequence[str], dtype: str, block_size: int, name: str | None = None,
                options: Mapping[str, Any] | None = None) -> tuple[Selection[MixerSpec] | None, MixerBackend | None]:
    """The selected mixer backend for a model calling ``families`` in ``dtype``, constructed; ``(None,
    None)`` when ``families`` is empty."""
    if not families:
        return None, None
    selection = registry.select(MIXER, name, options)
    spec = selection.backend.spec
    problems = []
    missing = sorted(set(families) - set(spec.families))
    if missing:
        problems.append(f"it does not compute the mixer families {missing} the model calls")
    if dtype not in spec.dtypes:
        problems.append(f"it does not compute in {dtype} (only {', '.join(spec.dtypes)})")
    if problems:
        fitting = [b.name for b in registry.available(MIXER)
                   if set(families) <= set(b.spec.families) and dtype in b.spec.dtypes]
        raise BackendUnavailableError(MIXER.name, selection.backend.name, "; ".join(problems), fitting)
    backend: MixerBackend = registry.load(selection.backend)(selection.options,
                                                             MixerContext(dtype=dtype, block_size=block_size))
    return selection, backend
