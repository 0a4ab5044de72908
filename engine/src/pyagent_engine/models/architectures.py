"""Find the model plugin that serves a file's architecture, through the registry.

A ``config.json`` names its architectures under ``architectures`` (``"Qwen2ForCausalLM"``); a GGUF
file under ``general.architecture`` (``"qwen2"``). The first installed
:class:`~pyagent_core.types.ModelSpec` naming one of them serves the file; none is an
:class:`~pyagent_core.errors.UnsupportedModelError` that lists the installed architectures.
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs

from pyagent_core.errors import UnsupportedModelError
from pyagent_core.interfaces.model import CausalLM
from pyagent_core.kinds import MODEL
from pyagent_core.registry import Registry, get_registry
from pyagent_core.types import ModelSpec


@attrs.frozen
class Architecture:
    """A model plugin chosen for a file.

    Attributes:
        spec: its registered record (``spec.name`` is the config's ``architecture``).
        model_class: its :class:`CausalLM` implementation.
        options: its validated options.
    """

    spec: ModelSpec
    model_class: type[CausalLM]
    options: dict[str, object]


def installed_architectures(registry: Registry) -> str:
    """The installed model plugins and what they serve, for messages: ``llama (LlamaForCausalLM; GGUF llama)``."""
    rows = [f"{s.name} ({', '.join(s.architectures) or '-'}; GGUF {', '.join(s.gguf_architectures) or '-'})"
            for s in (b.spec for b in registry.backends(MODEL))]
    return ", ".join(rows) or "none (install a model plugin such as pyagent-model-llama)"


def find_architecture(*, hf: Sequence[str] = (), gguf: str | None = None, where: str,
                      registry: Registry | None = None) -> Architecture:
    """The model plugin serving the ``config.json`` architecture names ``hf`` or the GGUF architecture ``gguf``.

    Raises :class:`UnsupportedModelError` naming ``where``, the architecture and the installed ones
    when no plugin serves it, or why its plugin cannot be loaded.
    """
    registry = registry or get_registry()
    for backend in registry.backends(MODEL):
        if backend.spec.serves(hf=hf, gguf=gguf):
            availability = registry.availability(backend)
            if not availability.available:
                raise UnsupportedModelError(f"{where}: the {backend.name} model plugin cannot run: "
                                            f"{availability.reason}")
            selection = registry.select(MODEL, backend.qualified_name)
            return Architecture(backend.spec, registry.load(backend), dict(selection.options))
    if gguf is not None:
        what = f"the GGUF architecture {gguf!r} (general.architecture)"
    else:
        what = f"the architectures {list(hf)} (config.json 'architectures')" if hf else "no architecture (its " \
            "config.json lacks 'architectures')"
    raise UnsupportedModelError(
        f"{where} names {what}, which no installed model plugin serves; installed architectures: "
        f"{installed_architectures(registry)}. A plugin adds one (pyagent new-plugin NAME --kind model)"
    )
