"""pyagent-core: hook specifications, typed registries and interfaces for LLM inference plugins.

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

__version__ = "0.2.0"

__all__ = [
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
