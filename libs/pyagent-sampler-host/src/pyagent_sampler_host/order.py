"""Which samplers a chain holds, in which order: an order string, or the default from the specs.

An order string names samplers like llama.cpp's ``--samplers`` (``"penalties,dry,top_k,temperature"``,
comma, semicolon or space separated; ``DIST:NAME`` where two distributions register ``NAME``). It may
end with a token selector (``"top_k,temperature,gumbel"``); otherwise the selector is the sampler
kind's selection (``PYAGENT_SAMPLER``, ``pyagent.toml``, the user config, else the available
selector with the highest priority). Without an order, the processors are every installed processor
that declares a stage, by stage, position and name (:func:`default_processor_order`).

A name two distributions register (a third party's ``top_k`` beside the reference one) resolves to
the distribution the host prefers (the distributions its own distribution requires, see
:func:`required_distributions`) with a warning, once per process, that says how to choose the other;
the default chain never resolves to an error this way. A bare name in an explicit order that no
preferred distribution registers stays an error naming both (``DIST:NAME`` chooses).

Nothing here imports torch or a sampler's implementation.
"""

from __future__ import annotations

import importlib.metadata as metadata
import threading
import warnings
from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import Any

import attrs
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from pyagent_core.errors import AmbiguousBackendError, SelectionError, UnknownBackendError
from pyagent_core.kinds import SAMPLER
from pyagent_core.registry import Backend, Registry, Selection
from pyagent_core.types import SamplerSpec


class SamplerNameClashWarning(UserWarning):
    """Several distributions register a sampler name a chain uses; the warning says which one it took."""

_warned: set[tuple[str, tuple[str, ...]]] = set()
_warned_lock = threading.Lock()


def parse_sampler_order(order: str | Sequence[str]) -> tuple[str, ...]:
    """Sampler names from an order string (``"top_k,top_p"``, comma, semicolon or space separated).

    Raises :class:`SelectionError` for a name given twice.
    """
    names = order.replace(";", ",").replace(" ", ",").split(",") if isinstance(order, str) else list(order)
    names = [name.strip() for name in names if name.strip()]
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        raise SelectionError(f"the sampler order {','.join(names)!r} names {repeated[0]!r} twice; "
                             "name each sampler once")
    return tuple(names)


def default_processor_order(specs: Iterable[SamplerSpec]) -> tuple[str, ...]:
    """The default processors over ``specs``: every processor whose ``stage`` is one of the processor
    stages, by stage (in the order of ``pyagent_core.types.SAMPLER_STAGES``), then ``position``, then name.

    Selectors and processors without a stage are left out (a chain runs them only when it names them).
    """
    staged = [spec for spec in specs if spec.stage is not None and not spec.selects_token]
    return tuple(spec.name for spec in sorted(staged, key=lambda spec: spec.chain_order))


def required_distributions(dist: str) -> frozenset[str]:
    """The canonical names of the distributions ``dist`` requires (its metadata's ``Requires-Dist``,
    extras included); empty when ``dist`` is not installed. A host passes them as its preference for
    names that several distributions register: its defaults come from what it declares."""
    try:
        requirements = metadata.requires(dist) or []
    except metadata.PackageNotFoundError:
        return frozenset()
    names = set()
    for line in requirements:
        try:
            names.add(canonicalize_name(Requirement(line).name))
        except InvalidRequirement:
            continue
    return frozenset(names)


@attrs.frozen
class ChainPlan:
    """The samplers a chain holds, before any is built.

    Attributes:
        processors: the logits processors' backends, in chain order.
        selector: the token selector's backend and where the choice came from (``None`` for a chain of
            processors only, as the transformers and vLLM adapters host: their runtime selects).
        skipped: staged processors the default chain leaves out because their requirements are not met.
    """

    processors: tuple[Backend[SamplerSpec], ...]
    selector: Selection[SamplerSpec] | None
    skipped: tuple[str, ...] = ()

    @property
    def names(self) -> list[str]:
        """The names in chain order: processors, then the selector."""
        return [b.name for b in self.processors] + ([self.selector.backend.name] if self.selector else [])


class ChainResolver:
    """Resolves sampler names against one registry with one preference for clashing names.

    Args:
        registry: where samplers are looked up.
        prefer: canonical distribution names whose backend wins a name several distributions register.
    """

    def __init__(self, registry: Registry, prefer: Collection[str] = ()) -> None:
        self.registry = registry
        self.prefer = frozenset(canonicalize_name(name) for name in prefer)

    def plan(self, order: str | Sequence[str] | None, *, with_selector: bool = True) -> ChainPlan:
        """The :class:`ChainPlan` of ``order`` (``None``: the default processors).

        Raises :class:`SelectionError`: an unknown or unavailable sampler, a selector that is not
        last or given twice, a selector where ``with_selector`` is false, or an ambiguous name.
        """
        if order is None:
            processors, skipped, named_selector = self._default_processors(), self._skipped(), None
        else:
            processors, named_selector, skipped = *self._named(parse_sampler_order(order), with_selector), ()
        selector = None
        if with_selector:
            if named_selector is not None:
                selector = self.registry.select(SAMPLER, named_selector.qualified_name)
            else:
                selector = self.registry.select(SAMPLER)
        return ChainPlan(tuple(processors), selector, skipped)

    def _named(self, names: Sequence[str],
               with_selector: bool) -> tuple[list[Backend[SamplerSpec]], Backend[SamplerSpec] | None]:
        backends = [self.resolve(name, explicit=True) for name in names]
        selectors = [i for i, b in enumerate(backends) if b.spec.selects_token]
        if selectors and not with_selector:
            raise SelectionError(f"{backends[selectors[0]].name!r} is a token selector, but this host's runtime "
                                 "chooses the token; name logits processors only")
        if len(selectors) > 1 or (selectors and selectors[0] != len(backends) - 1):
            raise SelectionError(f"the sampler order {','.join(names)!r} must end with at most one token selector "
                                 f"(it names {', '.join(backends[i].name for i in selectors)}); processors come first")
        for backend in backends:
            verdict = self.registry.availability(backend)
            if not verdict.available:
                raise SelectionError(f"sampler {backend.name!r} cannot run here: {verdict.reason}")
        selector = backends.pop() if selectors else None
        return backends, selector

    def _staged(self) -> list[Backend[SamplerSpec]]:
        return [b for b in self.registry.backends(SAMPLER) if b.spec.stage is not None and not b.spec.selects_token]

    def _default_processors(self) -> list[Backend[SamplerSpec]]:
        """Every available staged processor, one backend per name, in the order of the chosen backends'
        own stage and position."""
        names = dict.fromkeys(default_processor_order(b.spec for b in self._staged()))
        chosen = [self.resolve(name, explicit=False) for name in names if self._available_named(name)]
        return sorted(chosen, key=lambda b: b.spec.chain_order)

    def _available_named(self, name: str) -> bool:
        return any(self.registry.availability(b).available for b in self._staged() if b.name == name)

    def _skipped(self) -> tuple[str, ...]:
        names = dict.fromkeys(default_processor_order(b.spec for b in self._staged()))
        return tuple(name for name in names if not self._available_named(name))

    def resolve(self, name: str, *, explicit: bool) -> Backend[SamplerSpec]:
        """The backend ``name`` (or ``DIST:NAME``) stands for.

        A bare name several distributions register resolves to a preferred distribution's backend
        (warning once); without one, an explicit name raises :class:`AmbiguousBackendError` and a
        default-chain name takes the staged, available backend of highest priority, then distribution
        name (warning once). Raises :class:`UnknownBackendError` naming the installed samplers.
        """
        candidates = [b for b in self.registry.backends(SAMPLER) if b.name == name]
        if ":" in name or len(candidates) <= 1:
            try:
                return self.registry.get(SAMPLER, name)
            except UnknownBackendError as error:
                known = {b.name for b in self.registry.backends(SAMPLER)}
                raise UnknownBackendError("sampler", name, known, error.hint) from None
        if not explicit:
            candidates = [b for b in candidates if b.spec.stage is not None and self.registry.availability(b).available]
        preferred = [b for b in candidates if canonicalize_name(b.dist or b.plugin) in self.prefer]
        if len(preferred) == 1:
            chosen, why = preferred[0], "the distribution this host declares"
        elif explicit:
            raise AmbiguousBackendError("sampler", name, [b.dist or b.plugin for b in candidates])
        else:
            chosen = sorted(candidates, key=lambda b: (-b.spec.priority, b.dist or b.plugin))[0]
            why = "the highest priority, then the first distribution by name"
        _warn_clash(name, chosen, [b for b in self.registry.backends(SAMPLER) if b.name == name], why)
        return chosen


def _warn_clash(name: str, chosen: Backend[Any], claimants: Sequence[Backend[Any]], why: str) -> None:
    """Warn, once per process and name, which distribution's ``name`` a chain uses and how to pick another."""
    owners = tuple(sorted(b.dist or b.plugin for b in claimants))
    with _warned_lock:
        if (name, owners) in _warned:
            return
        _warned.add((name, owners))
    others = ", ".join(b.qualified_name for b in claimants if b is not chosen)
    warnings.warn(f"sampler {name!r} is registered by {' and '.join(owners)}; the chain uses "
                  f"{chosen.dist or chosen.plugin}'s ({why}); name {others} in the sampler order (--samplers) to "
                  "use the other", SamplerNameClashWarning, stacklevel=4)


def option_table(options: Mapping[str, Mapping[str, Any]], backend: Backend[Any]) -> Mapping[str, Any] | None:
    """The options given for ``backend``, under its ``DIST:NAME`` or its name."""
    return options.get(backend.qualified_name, options.get(backend.name))


def check_option_names(options: Mapping[str, Mapping[str, Any]], plan: ChainPlan) -> None:
    """Raise :class:`SelectionError` when ``options`` name a sampler that is not in ``plan``."""
    members = [*plan.processors, *([plan.selector.backend] if plan.selector else [])]
    allowed = {n for b in members for n in (b.name, b.qualified_name)}
    stray = sorted(set(options) - allowed)
    if stray:
        raise SelectionError(f"sampler options name {stray[0]!r}, which is not in the chain "
                             f"({','.join(plan.names) or 'no samplers'}); add it to the sampler order")
