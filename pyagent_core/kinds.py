"""The component kinds pyagent knows: name, registration hook, spec record type and interface.

Each kind is also a typed handle: ``Kind[S]`` carries its spec record type ``S``, so
``registry.select(ATTENTION)`` returns a ``Selection[AttentionSpec]`` and callers read
``selection.backend.spec.dtypes`` without a cast. A kind's name (``"attention"``) works everywhere
too, with results typed by the common base :class:`~pyagent_core.types.BackendSpec`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Generic, TypeVar

import attrs

from pyagent_core.errors import UnknownKindError
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

S = TypeVar("S", bound=BackendSpec)


def _every_backend(_spec: Any) -> bool:
    return True


@attrs.frozen
class Kind(Generic[S]):
    """One component kind and everything the registry needs to know about it.

    Attributes:
        selectable: which backends the kind's selection may name (``PYAGENT_<KIND>``, ``pyagent use``,
            the config files, the default): every one, except for samplers, where the selection
            names the chain's token selector (its ``select`` stage); logits processors join a chain
            by their stage, or by name in an order string.
        not_selectable: why a backend that ``selectable`` refuses cannot be the kind's selection,
            and what to do instead.
        default_by_priority: when nothing selects a backend, the available one with the highest
            priority is the default. ``False`` (tool-call and reasoning parsers): there is no
            default; a host uses none, or one it detects (``pyagent serve`` reads the chat template).
        no_default: what a host does when nothing selects a backend of a kind without a default.
    """

    name: str
    title: str
    hook: str
    spec_type: type[S]
    folder: str
    interface: str
    selectable: Callable[[Any], bool] = _every_backend
    not_selectable: str = ""
    default_by_priority: bool = True
    no_default: str = ""

    @property
    def plural(self) -> str:
        """The title in plural, for headings: ``KV-cache eviction policies``."""
        return self.title[:-1] + "ies" if self.title.endswith("y") else self.title + "s"

    @property
    def env_var(self) -> str:
        """Environment variable that selects a backend of this kind, e.g. ``PYAGENT_ATTENTION``."""
        return "PYAGENT_" + self.name.upper()


ATTENTION = Kind("attention", "attention backend", "pyagent_register_attention_backends", AttentionSpec,
                 "plugins/attention", "pyagent_core.interfaces.attention:AttentionBackend")
MIXER = Kind("mixer", "mixer backend", "pyagent_register_mixers", MixerSpec,
             "plugins/mixers", "pyagent_core.interfaces.mixer:MixerBackend")
SAMPLER = Kind("sampler", "sampler", "pyagent_register_samplers", SamplerSpec,
               "plugins/samplers", "pyagent_core.interfaces.sampler:Sampler",
               selectable=lambda spec: bool(spec.selects_token),
               not_selectable=("is a logits processor: the sampler selection names the chain's token selector (its "
                               "select stage). Processors join the default chain by their stage; name them in an "
                               "order such as --samplers top_k,temperature"))
GRAMMAR = Kind("grammar", "grammar backend", "pyagent_register_grammar_backends", GrammarSpec,
               "plugins/grammars", "pyagent_core.interfaces.grammar:GrammarBackend")
PROPOSER = Kind("proposer", "speculative proposer", "pyagent_register_proposers", ProposerSpec,
                "plugins/spec_decode", "pyagent_core.interfaces.proposer:Proposer")
EVICTION = Kind("eviction", "KV-cache eviction policy", "pyagent_register_eviction_policies", EvictionSpec,
                "plugins/kvcache", "pyagent_core.interfaces.eviction:EvictionPolicy")
SCHEDULER = Kind("scheduler", "scheduling policy", "pyagent_register_schedulers", SchedulerSpec,
                 "plugins/schedulers", "pyagent_core.interfaces.scheduler:SchedulingPolicy")
MODEL = Kind("model", "model architecture", "pyagent_register_models", ModelSpec,
             "plugins/models", "pyagent_core.interfaces.model:CausalLM", default_by_priority=False,
             no_default="the model file's architecture chooses it")
_PARSER_DEFAULT = "none unless one is selected (`pyagent serve` detects one from the model's chat template)"
TOOL_PARSER = Kind("tool_parser", "tool-call parser", "pyagent_register_tool_parsers", ToolParserSpec,
                   "plugins/tool_parsers", "pyagent_core.interfaces.tool_parser:ToolParser",
                   default_by_priority=False, no_default=_PARSER_DEFAULT)
REASONING_PARSER = Kind("reasoning_parser", "reasoning parser", "pyagent_register_reasoning_parsers",
                        ReasoningParserSpec, "plugins/tool_parsers",
                        "pyagent_core.interfaces.reasoning_parser:ReasoningParser",
                        default_by_priority=False, no_default=_PARSER_DEFAULT)

KINDS: dict[str, Kind[Any]] = {
    k.name: k for k in (ATTENTION, MIXER, SAMPLER, GRAMMAR, PROPOSER, EVICTION, SCHEDULER, MODEL, TOOL_PARSER,
                        REASONING_PARSER)
}

_ALIASES = {
    "samplers": "sampler", "logits_processor": "sampler", "grammars": "grammar",
    "structured_output": "grammar", "proposers": "proposer", "spec_decode": "proposer",
    "kvcache": "eviction", "eviction_policy": "eviction", "tool_parsers": "tool_parser",
    "reasoning_parsers": "reasoning_parser", "reasoning": "reasoning_parser",
    "models": "model", "architecture": "model", "architectures": "model",
    "mixers": "mixer", "sequence_mixer": "mixer",
    "schedulers": "scheduler", "scheduling": "scheduler", "scheduling_policy": "scheduler",
}


def get_kind(name: str | Kind[Any]) -> Kind[Any]:
    """Look a kind up by name, plural or alias (``tool-parser``, ``samplers``, ``kvcache``...); a
    :class:`Kind` is returned as it is."""
    if isinstance(name, Kind):
        return name
    key = name.strip().lower().replace("-", "_")
    key = _ALIASES.get(key, key)
    try:
        return KINDS[key]
    except KeyError:
        raise UnknownKindError(name, KINDS) from None
