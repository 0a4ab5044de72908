"""The per-request sampler parameters the installed samplers declare, for a host's front doors.

A sampler's spec declares a per-request parameter as an option with ``request=True`` (see
``pyagent_core.options.OptionSpec``): its type, its help for one, and what a command line writes.
A host offers every such parameter without knowing the sampler: the engine as a ``pyagent generate``
flag and a request field of ``pyagent serve``. Several samplers may read one parameter (``seed``);
the first declaration in chain order (stage, position, name) gives its type and help.

Nothing here imports torch or a sampler's implementation: the CLI builds its flags from this.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import attrs

from pyagent_core.options import OptionSpec
from pyagent_core.types import SamplerSpec


@attrs.frozen
class RequestParameter:
    """One per-request parameter: its declaration and the samplers that read it.

    Attributes:
        name: the parameter (``typical_p``); a flag spells it ``--typical-p``.
        option: its declaration (type, help, command-line form).
        samplers: the names of the samplers that declare it, in chain order.
    """

    name: str
    option: OptionSpec
    samplers: tuple[str, ...]

    @property
    def flag(self) -> str:
        """The command-line flag: ``--typical-p`` for ``typical_p``."""
        return "--" + self.name.replace("_", "-")


def request_parameters(specs: Iterable[SamplerSpec]) -> Mapping[str, RequestParameter]:
    """Every per-request parameter that one of ``specs`` declares (all the registered samplers' for a
    command line, a chain's for a server), by name, in chain order."""
    found: dict[str, RequestParameter] = {}
    for spec in sorted(specs, key=lambda spec: spec.chain_order):
        for name, option in spec.request_params().items():
            known = found.get(name)
            if known is None:
                found[name] = RequestParameter(name, option, (spec.name,))
            elif spec.name not in known.samplers:
                found[name] = attrs.evolve(known, samplers=(*known.samplers, spec.name))
    return found
