"""The frozen spec records that plugins register, one record type per component kind.

A spec describes a backend without importing it: ``impl`` is a ``"package.module:Class"`` path
resolved only when the backend is selected or checked. Records are attrs classes, frozen and
validated on construction, so a malformed registration fails inside the plugin that made it.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import Any, ClassVar

import attrs

from pyagent_core.errors import SpecError
from pyagent_core.options import OptionSpec, to_option_spec

NAME_RE = re.compile(r"^[a-z0-9][a-z0-9._-]*$")
IMPL_RE = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$")


def _check_name(_inst: Any, _attr: Any, value: str) -> None:
    if not isinstance(value, str) or not NAME_RE.match(value):
        raise SpecError(
            f"backend name {value!r} is invalid; use lowercase letters, digits, '.', '_' or '-', "
            "starting with a letter or digit (e.g. 'top_k', 'torch-sdpa')"
        )


def _check_impl(_inst: Any, _attr: Any, value: str) -> None:
    if not isinstance(value, str) or not IMPL_RE.match(value):
        raise SpecError(
            f"impl path {value!r} is invalid; write 'package.module:Attribute', "
            "e.g. 'my_plugin.impl:MyBackend'"
        )


def _freeze_options(value: Mapping[str, Any] | None) -> Mapping[str, OptionSpec]:
    items = {str(k): to_option_spec(str(k), v) for k, v in (value or {}).items()}
    return MappingProxyType(items)


def _to_tuple(value: Any) -> tuple[Any, ...]:
    if isinstance(value, str):
        return (value,)
    return tuple(value or ())


@attrs.frozen(kw_only=True)
class BackendSpec:
    """Fields every kind shares.

    Attributes:
        name: the name users select (unique per kind; ``dist:name`` disambiguates clashes).
        impl: ``"package.module:Attribute"`` of the implementation, imported lazily.
        summary: one line shown by ``pyagent list``.
        description: longer text shown by ``pyagent info``.
        priority: the highest-priority available backend is the default when nothing is selected.
        options: option name -> :class:`OptionSpec` (or a bare type as shorthand).
        requires: PEP 508 requirement strings checked through installed distribution metadata.
        install_hint: what to run when a requirement is missing.
    """

    kind: ClassVar[str] = ""

    name: str = attrs.field(validator=_check_name)
    impl: str = attrs.field(validator=_check_impl)
    summary: str = ""
    description: str = ""
    priority: int = 0
    options: Mapping[str, OptionSpec] = attrs.field(factory=dict, converter=_freeze_options)
    requires: tuple[str, ...] = attrs.field(default=(), converter=_to_tuple)
    install_hint: str = ""

    def capabilities(self) -> dict[str, Any]:
        """The kind-specific fields of this record, as shown by ``pyagent info``."""
        shared = {f.name for f in attrs.fields(BackendSpec)}
        return {
            f.name: getattr(self, f.name) for f in attrs.fields(type(self)) if f.name not in shared
        }


@attrs.frozen(kw_only=True)
class AttentionSpec(BackendSpec):
    """An attention backend over the paged KV cache.

    Attributes:
        dtypes: the torch dtype names it attends in.
        head_sizes: the head sizes it handles (empty: any).
        block_sizes: the cache block sizes it handles (empty: any).
        prefill: it handles several new tokens per sequence (prefill, chunked prefill).
        decode: it handles one new token per sequence.
        tree_mask: it honours ``AttentionMetadata.tree_mask`` (draft-tree verification).
        sliding_window: it honours ``AttentionContext.sliding_windows``; the engine refuses it for a
            model with a windowed layer otherwise.
        logits_soft_cap: it honours ``AttentionContext.logits_soft_cap``; the engine refuses it for
            a model that caps its attention scores otherwise.
    """

    kind: ClassVar[str] = "attention"

    dtypes: tuple[str, ...] = attrs.field(default=("float32",), converter=_to_tuple)
    head_sizes: tuple[int, ...] = attrs.field(default=(), converter=_to_tuple)  # () = any
    block_sizes: tuple[int, ...] = attrs.field(default=(), converter=_to_tuple)  # () = any
    prefill: bool = True
    decode: bool = True
    tree_mask: bool = False
    sliding_window: bool = False
    logits_soft_cap: bool = False


@attrs.frozen(kw_only=True)
class MixerSpec(BackendSpec):
    """A mixer backend: the sequence-mixer families beside attention it computes
    (:mod:`pyagent_core.interfaces.mixer`).

    Attributes:
        families: the families it implements, of :data:`~pyagent_core.interfaces.mixer.MIXER_FAMILIES`;
            the host never builds it for a model whose forward needs another.
        dtypes: the torch dtype names it computes in.
    """

    kind: ClassVar[str] = "mixer"

    families: tuple[str, ...] = attrs.field(default=(), converter=_to_tuple)
    dtypes: tuple[str, ...] = attrs.field(default=("float32",), converter=_to_tuple)

    @families.validator
    def _known_families(self, _attr: Any, value: tuple[str, ...]) -> None:
        from pyagent_core.interfaces.mixer import MIXER_FAMILIES

        unknown = sorted(set(value) - set(MIXER_FAMILIES))
        if not value or unknown:
            raise SpecError(f"mixer backend {self.name!r} declares families {list(value)}; name at least one, "
                            f"each of: {', '.join(MIXER_FAMILIES)}")


SELECT_STAGE = "select"
"""The stage of the token selector, which ends every chain: exactly one sampler of a chain is there."""

SAMPLER_STAGES = ("constraints", "penalties", "truncation", "temperature", "final", SELECT_STAGE)
"""The stages of a sampler chain, in the order they run:

- ``constraints``: hard constraints and biases on the raw logits (logit bias, banned, allowed and
  suppressed tokens, a minimum length, no-repeat n-grams): what a request forbids or forces.
- ``penalties``: penalties from the tokens seen so far (repetition, frequency, presence, DRY).
- ``truncation``: filters that drop unlikely tokens from the penalised distribution (top-k, top-p,
  min-p, typical, eta, epsilon, top-n-sigma, XTC).
- ``temperature``: scaling of what is left (dynamic temperature, then temperature).
- ``final``: processors that must see the fully shaped distribution and change it last
  (mirostat's adaptive cut-off).
- ``select``: the token selector (multinomial, greedy, gumbel...), which chooses each row's token
  from the processed logits. The other stages hold every processor that declares them; this one
  holds the one selector the sampler kind's selection names (see
  :class:`~pyagent_core.interfaces.sampler.TokenSelector` for how it treats greedy requests).
"""

PROCESSOR_STAGES = SAMPLER_STAGES[:-1]
"""The stages of logits processors: every stage but :data:`SELECT_STAGE`."""


@attrs.frozen(kw_only=True)
class SamplerSpec(BackendSpec):
    """A batch-level logits processor, or a token selector (``stage="select"``).

    Attributes:
        argmax_invariant: the processor never changes a row's argmax (the engine may skip it for
            greedy rows); checked by the conformance kit.
        stage: where the sampler goes in a chain: one of :data:`SAMPLER_STAGES`, which run in that
            order. A logits processor with one of the :data:`PROCESSOR_STAGES` is in the default
            chain; ``None``: it runs only when a chain names it (an explicit order such as
            ``--samplers``). A token selector declares :data:`SELECT_STAGE` (it implements
            :class:`~pyagent_core.interfaces.sampler.TokenSelector`); a chain holds one, chosen like
            the backend of any kind (see ``pyagent use sampler``).
        position: the processor's place within its stage, smallest first (processors with equal
            positions are ordered by name). The shipped processors use multiples of 10.

    An option of ``options`` declared with ``request=True`` is also a per-request parameter (see
    :class:`~pyagent_core.options.OptionSpec`): hosts offer it as a flag and a request field.
    """

    kind: ClassVar[str] = "sampler"

    argmax_invariant: bool = False
    stage: str | None = attrs.field(default=None)
    position: float = attrs.field(default=0)

    @stage.validator
    def _known_stage(self, _attr: Any, value: str | None) -> None:
        if value is not None and value not in SAMPLER_STAGES:
            raise SpecError(f"sampler {self.name!r} declares stage={value!r}, which is not a sampler stage; "
                            f"valid: {', '.join(SAMPLER_STAGES)} (or None: only in chains that name it)")

    @position.validator
    def _finite_position(self, _attr: Any, value: Any) -> None:
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
            raise SpecError(f"sampler {self.name!r} declares position={value!r}; use a finite number "
                            "(its place within its stage, smallest first)")

    @property
    def selects_token(self) -> bool:
        """Whether this is a token selector (``stage == "select"``) rather than a logits processor."""
        return self.stage == SELECT_STAGE

    @property
    def chain_order(self) -> tuple[int, float, str]:
        """The sort key of the default chain: stage (in :data:`SAMPLER_STAGES` order), position, name.

        Only meaningful for a sampler with a stage.
        """
        return (SAMPLER_STAGES.index(self.stage) if self.stage else len(SAMPLER_STAGES), self.position, self.name)

    def request_params(self) -> dict[str, OptionSpec]:
        """The options that are also per-request parameters (``request=True``), by name."""
        return {name: option for name, option in self.options.items() if option.request}


CONSTRAINT_KINDS = ("json_schema", "json_object", "regex", "choice", "grammar", "structural_tag")


@attrs.frozen(kw_only=True)
class GrammarSpec(BackendSpec):
    """A structured-output backend: which constraint kinds and grammar dialects it compiles, and
    which JSON Schema keywords it does not enforce.

    ``ignored_keywords`` are keywords the backend compiles without enforcing them (an output may
    break them); ``refused_keywords`` are keywords it refuses schemas for (with its default
    options). Every other keyword is enforced. ``enforced_formats`` are the values of ``format`` it
    enforces although ``format`` is listed (other values are ignored or refused as listed). The
    engine's ``auto`` choice prefers a backend that enforces every keyword of a schema and reports
    those no backend enforced; the conformance kit checks the lists against the backend's behaviour.
    """

    kind: ClassVar[str] = "grammar"

    constraint_kinds: tuple[str, ...] = attrs.field(default=(), converter=_to_tuple)
    grammar_dialects: tuple[str, ...] = attrs.field(default=(), converter=_to_tuple)
    jump_forward: bool = False
    rollback: bool = False
    ignored_keywords: tuple[str, ...] = attrs.field(default=(), converter=_to_tuple)
    refused_keywords: tuple[str, ...] = attrs.field(default=(), converter=_to_tuple)
    enforced_formats: tuple[str, ...] = attrs.field(default=(), converter=_to_tuple)

    def unenforced(self, keywords: Iterable[str], formats: Iterable[str] = ()) -> tuple[str, ...]:
        """Which of ``keywords`` this backend ignores or refuses, sorted; when that includes ``format``,
        the ``formats`` it does not enforce stand for it, as ``format:NAME``."""
        missing = set(keywords) & {*self.ignored_keywords, *self.refused_keywords}
        if "format" in missing:
            missing.remove("format")
            missing |= {f"format:{name}" for name in formats if name not in self.enforced_formats}
        return tuple(sorted(missing))

    @constraint_kinds.validator
    def _known(self, _attr: Any, value: tuple[str, ...]) -> None:
        unknown = sorted(set(value) - set(CONSTRAINT_KINDS))
        if unknown:
            raise SpecError(
                f"grammar backend {self.name!r} declares unknown constraint kinds {unknown}; "
                f"valid: {', '.join(CONSTRAINT_KINDS)}"
            )


@attrs.frozen(kw_only=True)
class ProposerSpec(BackendSpec):
    """A speculative-decoding proposer; ``tree`` when it proposes tree-shaped drafts."""

    kind: ClassVar[str] = "proposer"

    tree: bool = False
    needs_model: bool = False


@attrs.frozen(kw_only=True)
class EvictionSpec(BackendSpec):
    """A KV-cache block eviction policy (used by the device block pool and the offload tier)."""

    kind: ClassVar[str] = "eviction"


@attrs.frozen(kw_only=True)
class SchedulerSpec(BackendSpec):
    """A scheduling policy: the order waiting requests are admitted in and the preemption victim.

    Attributes:
        uses_cached_prefix: the policy reads ``RequestView.cached_tokens`` (the prompt tokens a prefix
            cache holds for each waiting request); the host looks them up only for such a policy, and
            it needs prefix caching turned on.
    """

    kind: ClassVar[str] = "scheduler"

    uses_cached_prefix: bool = False


@attrs.frozen(kw_only=True)
class ModelSpec(BackendSpec):
    """A model architecture: the decoder a checkpoint or GGUF file of these architectures runs on.

    Attributes:
        architectures: the names a Hugging Face ``config.json`` lists under ``architectures``
            (``"LlamaForCausalLM"``).
        gguf_architectures: the ``general.architecture`` values of GGUF files it reads (``"llama"``).
        recurrent_state: some layer keeps a fixed-size state per sequence
            (:class:`~pyagent_core.interfaces.cache.RecurrentState` in its cache layout), so the engine
            features of :meth:`limits` are off for it.
    """

    kind: ClassVar[str] = "model"

    architectures: tuple[str, ...] = attrs.field(default=(), converter=_to_tuple)
    gguf_architectures: tuple[str, ...] = attrs.field(default=(), converter=_to_tuple)
    recurrent_state: bool = False

    def limits(self) -> dict[str, str]:
        """Engine features this architecture cannot use, and why (none for attention-only models)."""
        from pyagent_core.interfaces.cache import STATE_LIMITS

        return dict(STATE_LIMITS) if self.recurrent_state else {}

    def __attrs_post_init__(self) -> None:
        if not (self.architectures or self.gguf_architectures):
            raise SpecError(f"model {self.name!r} names no architecture; set architectures (config.json names "
                            "such as 'LlamaForCausalLM') and/or gguf_architectures (such as 'llama')")

    def serves(self, *, hf: Iterable[str] = (), gguf: str | None = None) -> bool:
        """Whether it serves one of the ``config.json`` architecture names ``hf`` or the GGUF ``gguf``."""
        return bool(set(hf) & set(self.architectures)) or (gguf is not None and gguf in self.gguf_architectures)


@attrs.frozen(kw_only=True)
class ToolParserSpec(BackendSpec):
    """A tool-call parser; ``template_markers`` are chat-template substrings used for detection."""

    kind: ClassVar[str] = "tool_parser"

    model_families: tuple[str, ...] = attrs.field(default=(), converter=_to_tuple)
    template_markers: tuple[str, ...] = attrs.field(default=(), converter=_to_tuple)


@attrs.frozen(kw_only=True)
class ReasoningParserSpec(BackendSpec):
    """A reasoning-content parser (text between the model's thinking markers)."""

    kind: ClassVar[str] = "reasoning_parser"

    model_families: tuple[str, ...] = attrs.field(default=(), converter=_to_tuple)
    template_markers: tuple[str, ...] = attrs.field(default=(), converter=_to_tuple)
