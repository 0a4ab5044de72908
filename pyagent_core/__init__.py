"""pyagent-core: hook specifications, typed registries and interfaces for LLM inference plugins.

The contract a plugin relies on is versioned: :data:`CONTRACT_VERSION` (see
:mod:`pyagent_core.version`), and a dependent states the range ``pyagent-core>=0.3,<0.4``.
Importing this package is cheap: it loads neither torch nor any backend. Plugins are discovered
only when :func:`pyagent_core.registry.get_registry` (or ``Registry.load_plugins``) is called.
"""

from pyagent_core.hookspecs import hookimpl, hookspec
from pyagent_core.options import OptionSpec
from pyagent_core.types import (
    AttentionSpec,
    BackendSpec,
    EvictionSpec,
    GrammarSpec,
    MixerSpec,
    ModelSpec,
    ProposerSpec,
    ReasoningParserSpec,
    SamplerSpec,
    SchedulerSpec,
    ToolParserSpec,
)
from pyagent_core.version import CONTRACT_VERSION, __version__

__all__ = [
    "CONTRACT_VERSION",
    "AttentionSpec",
    "BackendSpec",
    "EvictionSpec",
    "GrammarSpec",
    "MixerSpec",
    "ModelSpec",
    "OptionSpec",
    "ProposerSpec",
    "ReasoningParserSpec",
    "SamplerSpec",
    "SchedulerSpec",
    "ToolParserSpec",
    "__version__",
    "hookimpl",
    "hookspec",
]
