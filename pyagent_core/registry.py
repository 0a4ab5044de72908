"""Typed registries: what every plugin registered, what is available, and what is selected.

The registry loads plugins explicitly (:meth:`Registry.load_plugins`), calls each kind's
registration hook once per plugin so that one failing plugin is reported and skipped without
hiding the others, and answers questions about backends without importing their
implementations: availability is judged from declared requirements and installed distribution
metadata; only :meth:`Registry.check` (``pyagent list --check``) and :meth:`Registry.load`
import code.

Selection follows DESIGN.md rule 5: explicit argument > ``PYAGENT_<KIND>`` > project
``pyagent.toml`` > user config > the highest-priority available backend (a kind without a default,
the parsers, has none: :meth:`Registry.selected` is then ``None``).
"""

from __future__ import annotations

import importlib.metadata as metadata
import os
import sys
import threading
import traceback
from collections.abc import Callable, Iterable, Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Generic, TypeVar, overload

import attrs
import pluggy
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from pyagent_core import hookspecs
from pyagent_core.config import Settings
from pyagent_core.discovery import PluginControl, PluginEntry, iter_entry_points
from pyagent_core.errors import (
    AmbiguousBackendError,
    BackendUnavailableError,
    NoBackendError,
    NothingSelectedError,
    NotSelectableError,
    OptionError,
    SpecError,
    UnknownBackendError,
)
from pyagent_core.kinds import KINDS, Kind, get_kind
from pyagent_core.lazy import import_impl
from pyagent_core.options import validate_options
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

if TYPE_CHECKING:
    from pyagent_core.interfaces.attention import AttentionBackend
    from pyagent_core.interfaces.eviction import EvictionPolicy
    from pyagent_core.interfaces.grammar import GrammarBackend
    from pyagent_core.interfaces.mixer import MixerBackend
    from pyagent_core.interfaces.model import CausalLM
    from pyagent_core.interfaces.proposer import Proposer
    from pyagent_core.interfaces.reasoning_parser import ReasoningParser
    from pyagent_core.interfaces.sampler import Sampler
    from pyagent_core.interfaces.scheduler import SchedulingPolicy
    from pyagent_core.interfaces.tool_parser import ToolParser

STATUS_OK, STATUS_FAILED, STATUS_BLOCKED = "ok", "failed", "blocked"
NO_BACKEND = "none"
"""The selection that turns a kind without a default off, whatever a host would detect
(``PYAGENT_TOOL_PARSER=none``, ``--tool-parser none``)."""

S = TypeVar("S", bound=BackendSpec)


def _reason(exc: BaseException) -> str:
    """A one-line reason for an exception: its type and message, plus where it was raised."""
    frames = traceback.extract_tb(exc.__traceback__)
    where = f" ({frames[-1].filename}:{frames[-1].lineno})" if frames else ""
    return f"{type(exc).__name__}: {exc}{where}"


@attrs.frozen
class PluginInfo:
    """One plugin as ``pyagent plugins`` shows it."""

    name: str
    module: str
    dist: str | None
    version: str | None
    status: str
    hooks: tuple[str, ...] = ()
    kinds: tuple[str, ...] = ()
    errors: tuple[str, ...] = ()


@attrs.frozen
class Backend(Generic[S]):
    """A registered backend: its spec record and the plugin and distribution that registered it.

    ``Backend[AttentionSpec]`` when looked up through a typed kind handle (``registry.get(ATTENTION, ...)``).
    """

    kind: str
    spec: S
    plugin: str
    dist: str | None
    version: str | None

    @property
    def name(self) -> str:
        """The backend's name as registered."""
        return self.spec.name

    @property
    def qualified_name(self) -> str:
        """``dist:name``, which selects this backend even when another distribution claims the name."""
        return f"{self.dist or self.plugin}:{self.spec.name}"


@attrs.frozen
class Availability:
    """Whether a backend can be used here, and if not, why. ``checked``: the deep check ran."""

    available: bool
    reason: str | None = None
    checked: bool = False


@attrs.frozen
class Selection(Generic[S]):
    """The backend chosen for a kind, its validated options, and where each choice came from."""

    backend: Backend[S]
    source: str
    options: Mapping[str, Any]
    option_sources: Mapping[str, str]


def requirement_problem(requirement: str) -> str | None:
    """Why ``requirement`` (PEP 508) is not met by the installed distributions, or ``None``."""
    try:
        req = Requirement(requirement)
    except InvalidRequirement as exc:
        return f"invalid requirement {requirement!r}: {exc}"
    if req.marker is not None and not req.marker.evaluate():
        return None
    try:
        version = metadata.version(req.name)
    except metadata.PackageNotFoundError:
        return f"requires {requirement}, which is not installed"
    if req.specifier and not req.specifier.contains(version, prereleases=True):
        return f"requires {requirement}, but {req.name} {version} is installed"
    return None


class Registry:
    """All plugins and backends of one process (or one test), loaded on demand.

    Args:
        environ: environment to read control variables and selections from (default ``os.environ``).
        plugins: extra ``(name, module_or_object)`` plugins registered before entry points, for
            engine builders and tests that do not install a distribution.
        entry_points: override entry-point discovery (default: the ``pyagent`` group).
        settings: configuration files to select from (default: read lazily for the working directory).
    """

    def __init__(
        self,
        *,
        environ: Mapping[str, str] | None = None,
        plugins: Iterable[tuple[str, object]] = (),
        entry_points: Iterable[PluginEntry] | None = None,
        settings: Settings | None = None,
    ) -> None:
        self.environ = dict(os.environ if environ is None else environ)
        self.control = PluginControl.from_env(self.environ)
        self._extra = list(plugins)
        self._entry_points = entry_points
        self._settings = settings
        self._lock = threading.RLock()
        self._loaded = False
        self._plugins: dict[str, PluginInfo] = {}
        self._backends: dict[str, list[Backend[Any]]] = {kind: [] for kind in KINDS}
        self._availability: dict[tuple[str, str, bool], Availability] = {}
        self.pm = pluggy.PluginManager(hookspecs.PROJECT)
        self.pm.add_hookspecs(hookspecs)
        if self.control.trace:
            self.pm.trace.root.setwriter(sys.stderr.write)
            self.pm.enable_tracing()

    # --- loading -------------------------------------------------------------------------------

    def load_plugins(self) -> Registry:
        """Import every allowed plugin and collect its registrations. Idempotent; returns self."""
        with self._lock:
            if self._loaded:
                return self
            entries = list(iter_entry_points() if self._entry_points is None else self._entry_points)
            for name, plugin in self._extra:
                self._register(name, plugin, None, None, getattr(plugin, "__name__", repr(plugin)))
            for entry in entries:
                self._load_entry(entry)
            for kind in KINDS.values():
                self._collect(kind)
            self._loaded = True
            return self

    def _load_entry(self, entry: PluginEntry) -> None:
        key = self._plugin_key(entry.name, entry.dist)
        blocked = self.control.blocked_reason(entry.name, entry.dist)
        if blocked:
            self._plugins[key] = PluginInfo(key, entry.module, entry.dist, entry.version,
                                            STATUS_BLOCKED, errors=(blocked,))
            return
        try:
            module = entry.load()
        except Exception as exc:  # a broken plugin is reported, never fatal
            self._plugins[key] = PluginInfo(key, entry.module, entry.dist, entry.version,
                                            STATUS_FAILED, errors=(f"import failed: {_reason(exc)}",))
            return
        self._register(key, module, entry.dist, entry.version, entry.module)

    def _plugin_key(self, name: str, dist: str | None) -> str:
        """The plugin's name, qualified by its distribution when another plugin has the same name."""
        if name in self._plugins or self.pm.get_plugin(name) is not None:
            return f"{dist}:{name}" if dist else f"{name}#{len(self._plugins)}"
        return name

    def _register(self, name: str, plugin: object, dist: str | None, version: str | None,
                  module: str) -> None:
        try:
            self.pm.register(plugin, name=name)
        except Exception as exc:  # pluggy rejects hooks whose arguments do not match a spec
            self._plugins[name] = PluginInfo(name, module, dist, version, STATUS_FAILED,
                                             errors=(f"invalid hooks: {_reason(exc)}",))
            return
        callers = self.pm.get_hookcallers(plugin) or []
        hooks = tuple(sorted(c.name for c in callers if c.has_spec()))
        unknown = tuple(
            f"unknown hook {c.name!r} (no such hook specification; check the spelling)"
            for c in callers if not c.has_spec()
        )
        self._plugins[name] = PluginInfo(name, module, dist, version, STATUS_OK, hooks, errors=unknown)

    def _isolated_callers(self, hook: str) -> list[tuple[str, Callable[..., Any]]]:
        """One caller per plugin implementing ``hook``, so each plugin's failure stays its own."""
        impls = getattr(self.pm.hook, hook).get_hookimpls()
        owners = [impl.plugin for impl in impls]
        return [
            (impl.plugin_name,
             self.pm.subset_hook_caller(hook, [p for p in owners if p is not impl.plugin]))
            for impl in impls
        ]

    def call_hook(self, hook: str, **kwargs: Any) -> list[tuple[str, Exception]]:
        """Call every plugin's implementation of ``hook`` in isolation.

        Returns ``(plugin name, exception)`` for each implementation that raised; the others
        still run. The engine uses this for lifecycle hooks and the CLI for command hooks.
        """
        return self.gather_hook(hook, **kwargs)[1]

    def gather_hook(self, hook: str, **kwargs: Any) -> tuple[list[tuple[str, Any]], list[tuple[str, Exception]]]:
        """Call every plugin's implementation of ``hook`` in isolation and collect what each returned.

        Returns ``(results, failures)``: ``(plugin name, result)`` for each implementation that
        returned something other than ``None``, and ``(plugin name, exception)`` for each that raised.
        """
        self.load_plugins()
        results: list[tuple[str, Any]] = []
        failures: list[tuple[str, Exception]] = []
        for plugin_name, caller in self._isolated_callers(hook):
            try:
                results.extend((plugin_name, result) for result in caller(**kwargs))
            except Exception as exc:
                failures.append((plugin_name, exc))
        return results, failures

    def _collect(self, kind: Kind) -> None:
        for plugin_name, caller in self._isolated_callers(kind.hook):
            info = self._plugins[plugin_name]
            collected: list[BackendSpec] = []
            try:
                caller(register=self._make_register(kind, info, collected))
            except Exception as exc:
                self._plugins[info.name] = attrs.evolve(
                    info, status=STATUS_FAILED,
                    errors=(*info.errors, f"{kind.hook} raised {_reason(exc)}"))
                continue
            for spec in collected:
                self._backends[kind.name].append(
                    Backend(kind.name, spec, info.name, info.dist, info.version))
            if collected and kind.name not in info.kinds:
                self._plugins[info.name] = attrs.evolve(info, kinds=(*info.kinds, kind.name))

    @staticmethod
    def _make_register(kind: Kind, info: PluginInfo, out: list[BackendSpec]) -> Callable[[Any], None]:
        def register(spec: Any) -> None:
            if not isinstance(spec, kind.spec_type):
                raise SpecError(
                    f"plugin {info.name!r} passed {spec!r} to {kind.hook}; "
                    f"register a {kind.spec_type.__name__} record"
                )
            if any(s.name == spec.name for s in out):
                raise SpecError(f"plugin {info.name!r} registered {kind.name} {spec.name!r} twice")
            out.append(spec)

        return register

    # --- queries -------------------------------------------------------------------------------

    def plugins(self) -> list[PluginInfo]:
        """Every plugin seen, loaded or not, with its status and errors."""
        self.load_plugins()
        return sorted(self._plugins.values(), key=lambda p: p.name)

    def problems(self) -> list[str]:
        """Human-readable problems: failed plugins, unknown hooks and name clashes."""
        out = [f"plugin {p.name!r} ({p.dist or 'no distribution'}): {err}"
               for p in self.plugins() if p.status != STATUS_BLOCKED for err in p.errors]
        for kind in KINDS:
            for name, dists in self._clashes(kind).items():
                out.append(str(AmbiguousBackendError(kind, name, dists)))
        return out

    def control_problems(self) -> list[str]:
        """Names in ``PYAGENT_PLUGINS`` / ``PYAGENT_DISABLE_PLUGINS`` that match no installed plugin (the
        command line warns about them on every run: such a typo hides commands and backends)."""
        installed = {canonicalize_name(n) for p in self.plugins()
                     for n in (p.name.rpartition(":")[2], p.dist) if n}
        choices = ", ".join(sorted(p.name for p in self.plugins()))
        return [f"{variable} names {name!r}, which is no installed plugin or distribution; installed: {choices}"
                for variable, names in (("PYAGENT_PLUGINS", self.control.allow),
                                        ("PYAGENT_DISABLE_PLUGINS", self.control.deny))
                for name in sorted(names - installed)]

    def blocked_hint(self, kind: str) -> str:
        """Why no backend of ``kind`` registered, when plugin control blocked plugins (else empty)."""
        blocked = [p.name for p in self.plugins() if p.status == STATUS_BLOCKED]
        if not blocked or self._backends[kind]:
            return ""
        unknown = self.control_problems()
        return (f"{len(blocked)} installed plugins are blocked by the plugin control variables "
                f"(blocked: {', '.join(sorted(blocked))})" + (f"; {unknown[0]}" if unknown else ""))

    def _clashes(self, kind: str) -> dict[str, list[str]]:
        by_name: dict[str, list[str]] = {}
        for backend in self._backends[kind]:
            by_name.setdefault(backend.name, []).append(backend.dist or backend.plugin)
        return {name: owners for name, owners in by_name.items() if len(owners) > 1}

    @overload
    def backends(self, kind: Kind[S]) -> list[Backend[S]]: ...
    @overload
    def backends(self, kind: str) -> list[Backend[BackendSpec]]: ...

    def backends(self, kind: str | Kind[Any]) -> list[Backend[Any]]:
        """Every backend registered for ``kind`` (a :class:`Kind`, its name, or an alias such as
        ``samplers``), by name."""
        self.load_plugins()
        return sorted(self._backends[get_kind(kind).name], key=lambda b: (b.name, b.dist or ""))

    @overload
    def get(self, kind: Kind[S], name: str) -> Backend[S]: ...
    @overload
    def get(self, kind: str, name: str) -> Backend[BackendSpec]: ...

    def get(self, kind: str | Kind[Any], name: str) -> Backend[Any]:
        """The backend ``name`` (or ``dist:name``) of ``kind``.

        Raises :class:`UnknownBackendError` (with the choices and any broken plugins) or
        :class:`AmbiguousBackendError` when several distributions claim ``name``.
        """
        kind_name = get_kind(kind).name
        candidates = self.backends(kind_name)
        dist, sep, short = name.rpartition(":")
        if sep:
            owner = canonicalize_name(dist)
            found = [b for b in candidates if b.name == short
                     and owner in {canonicalize_name(b.dist or ""), canonicalize_name(b.plugin)}]
        else:
            found = [b for b in candidates if b.name == name]
        if len(found) == 1:
            return found[0]
        if len(found) > 1:
            raise AmbiguousBackendError(kind_name, short, [b.dist or b.plugin for b in found])
        raise UnknownBackendError(kind_name, name, {b.name for b in candidates}, self._broken_hint())

    def _broken_hint(self) -> str:
        broken = [f"{p.name} ({p.errors[0]})" for p in self.plugins() if p.status == STATUS_FAILED]
        return "plugins that failed to load and may provide it: " + "; ".join(broken) if broken else ""

    def availability(self, backend: Backend[Any], deep: bool = False) -> Availability:
        """Whether ``backend`` can run here.

        Without ``deep`` only declared requirements are checked against installed distributions;
        nothing is imported. With ``deep`` the implementation is imported and its
        ``check_available()`` (if any) is called; an exception or a returned string is the reason.
        """
        key = (backend.kind, backend.qualified_name, deep)
        if key in self._availability:
            return self._availability[key]
        result = self._judge(backend, deep)
        self._availability[key] = result
        return result

    def _judge(self, backend: Backend[Any], deep: bool) -> Availability:
        for requirement in backend.spec.requires:
            problem = requirement_problem(requirement)
            if problem:
                hint = f"; {backend.spec.install_hint}" if backend.spec.install_hint else ""
                return Availability(False, problem + hint)
        if not deep:
            return Availability(True)
        try:
            impl = import_impl(backend.spec.impl)
            check = getattr(impl, "check_available", None)
            verdict = check() if callable(check) else None
        except Exception as exc:
            return Availability(False, f"check failed: {_reason(exc)}", checked=True)
        if isinstance(verdict, str) and verdict:
            return Availability(False, verdict, checked=True)
        return Availability(True, checked=True)

    def check(self, backend: Backend[Any]) -> Availability:
        """Deep check: import the implementation and run its ``check_available()``."""
        return self.availability(backend, deep=True)

    @overload
    def available(self, kind: Kind[S]) -> list[Backend[S]]: ...
    @overload
    def available(self, kind: str) -> list[Backend[BackendSpec]]: ...

    def available(self, kind: str | Kind[Any]) -> list[Backend[Any]]:
        """The backends of ``kind`` whose requirements are met, by name."""
        return [b for b in self.backends(kind) if self.availability(b).available]

    @overload
    def default(self, kind: Kind[S]) -> Backend[S] | None: ...
    @overload
    def default(self, kind: str) -> Backend[BackendSpec] | None: ...

    def default(self, kind: str | Kind[Any]) -> Backend[Any] | None:
        """The backend of ``kind`` chosen when nothing selects one: the available backend with the
        highest priority (ties: by name) among those the kind's selection may name (for samplers, the
        token selectors), if any; ``None`` for a kind without a default (the parsers)."""
        handle = get_kind(kind)
        if not handle.default_by_priority:
            return None
        choices = sorted((b for b in self.available(handle.name) if handle.selectable(b.spec)),
                         key=lambda b: (-b.spec.priority, b.name, b.dist or ""))
        return choices[0] if choices else None

    def check_selectable(self, backend: Backend[Any], source: str) -> None:
        """Raise :class:`NotSelectableError` when ``backend`` cannot be its kind's selection (a sampler
        selection naming a logits processor); ``source`` says where the choice came from."""
        handle = get_kind(backend.kind)
        if not handle.selectable(backend.spec):
            valid = {b.name for b in self.backends(handle.name) if handle.selectable(b.spec)}
            raise NotSelectableError(handle.name, backend.name, source, handle.not_selectable, valid)

    @overload
    def load(self, backend: Backend[AttentionSpec]) -> type[AttentionBackend]: ...
    @overload
    def load(self, backend: Backend[MixerSpec]) -> type[MixerBackend]: ...
    @overload
    def load(self, backend: Backend[SamplerSpec]) -> type[Sampler]: ...
    @overload
    def load(self, backend: Backend[GrammarSpec]) -> type[GrammarBackend]: ...
    @overload
    def load(self, backend: Backend[ProposerSpec]) -> type[Proposer]: ...
    @overload
    def load(self, backend: Backend[EvictionSpec]) -> type[EvictionPolicy]: ...
    @overload
    def load(self, backend: Backend[SchedulerSpec]) -> type[SchedulingPolicy]: ...
    @overload
    def load(self, backend: Backend[ModelSpec]) -> type[CausalLM]: ...
    @overload
    def load(self, backend: Backend[ToolParserSpec]) -> type[ToolParser]: ...
    @overload
    def load(self, backend: Backend[ReasoningParserSpec]) -> type[ReasoningParser]: ...
    @overload
    def load(self, backend: Backend[BackendSpec]) -> type: ...

    def load(self, backend: Backend[Any]) -> type:
        """Import and return the implementation class of ``backend``, built as ``cls(options, context)``.

        The result is typed by the backend's kind (``type[AttentionBackend]`` for a
        ``Backend[AttentionSpec]``, ``type[Sampler]`` for a sampler, ...) and checked to be a subclass
        of that kind's interface (:attr:`Kind.interface`). Raises :class:`SpecError` naming the
        backend when the spec's ``impl`` names something else; an ``ImportError`` of the
        implementation propagates.
        """
        impl = import_impl(backend.spec.impl)
        interface_path = KINDS[backend.kind].interface
        interface = import_impl(interface_path)
        if not (isinstance(impl, type) and issubclass(impl, interface)):
            raise SpecError(
                f"{backend.kind} backend {backend.qualified_name!r}: impl {backend.spec.impl!r} is {impl!r}, "
                f"not a subclass of {interface_path.replace(':', '.')}; derive the implementation from it"
            )
        return impl

    # --- selection -----------------------------------------------------------------------------

    @property
    def settings(self) -> Settings:
        """The configuration files in effect (read on first use)."""
        if self._settings is None:
            self._settings = Settings.load(self.environ)
        return self._settings

    @overload
    def select(self, kind: Kind[S], name: str | None = None,
               options: Mapping[str, Any] | None = None) -> Selection[S]: ...
    @overload
    def select(self, kind: str, name: str | None = None,
               options: Mapping[str, Any] | None = None) -> Selection[BackendSpec]: ...

    def select(self, kind: str | Kind[Any], name: str | None = None,
               options: Mapping[str, Any] | None = None) -> Selection[Any]:
        """Choose the backend of ``kind``: ``name`` > environment > project > user > priority.

        ``name`` may be any backend of the kind (a host asking for one by name: the sampler chain's
        processors); the other sources name one the kind's selection may name (for samplers, a token
        selector). ``options`` (from code or ``--opt``) override the option tables of the config
        files. Raises a :class:`~pyagent_core.errors.SelectionError` naming the backend, the reason
        and the valid choices (:class:`NothingSelectedError` when nothing selects a backend of a
        kind without a default), or :class:`OptionError` for a bad option.
        """
        handle = get_kind(kind)
        kind_name = handle.name
        if name:
            chosen, source = name, "argument"
        elif (configured := self.settings.selected(kind_name)) is not None:
            chosen, source = configured
        else:
            default = self.default(kind_name)
            if default is None:
                if not handle.default_by_priority:
                    raise NothingSelectedError(kind_name, handle.env_var, handle.no_default)
                raise NoBackendError(kind_name, [(b.name, self.availability(b).reason or "")
                                                 for b in self.backends(kind_name) if handle.selectable(b.spec)],
                                     self.blocked_hint(kind_name))
            return self._with_options(default, f"default (priority {default.spec.priority})", options)
        try:
            backend = self.get(kind_name, chosen)
        except UnknownBackendError as exc:
            if source == "argument":
                raise
            where = f"the {source} selects it; change it there, or run `pyagent use {kind_name} NAME`"
            raise UnknownBackendError(kind_name, chosen, {b.name for b in self.backends(kind_name)},
                                      "; ".join(filter(None, (where, exc.hint)))) from None
        if source != "argument":
            self.check_selectable(backend, source)
        verdict = self.availability(backend)
        if not verdict.available:
            raise BackendUnavailableError(kind_name, chosen, verdict.reason or "unavailable",
                                          [b.name for b in self.available(kind_name)])
        return self._with_options(backend, source, options)

    def selected(self, kind: str | Kind[Any], name: str | None = None,
                 options: Mapping[str, Any] | None = None) -> Selection[Any] | None:
        """:meth:`select`, or ``None`` for a kind without a default (the parsers) when nothing selects
        a backend or the selection is :data:`NO_BACKEND` (a host then uses none, or detects one)."""
        handle = get_kind(kind)
        if not handle.default_by_priority:
            configured = name or (self.settings.selected(handle.name) or (None, ""))[0]
            if configured is None or configured == NO_BACKEND:
                return None
        return self.select(handle, name, options)

    def _with_options(self, backend: Backend[Any], source: str,
                      explicit: Mapping[str, Any] | None) -> Selection[Any]:
        owner = f"{backend.kind} backend {backend.name!r}"
        layers = self.settings.option_layers(backend.kind, backend.name)
        layers.append((dict(explicit or {}), "argument"))
        values: dict[str, Any] = {}
        sources: dict[str, str] = {}
        for layer, layer_source in layers:
            try:
                validate_options(backend.spec.options, layer, owner)
            except OptionError as exc:
                raise OptionError(f"{exc} (from {layer_source})") from None
            values.update(layer)
            sources.update(dict.fromkeys(layer, layer_source))
        merged = validate_options(backend.spec.options, values, owner)
        for key in merged:
            sources.setdefault(key, "default")
        return Selection(backend, source, MappingProxyType(merged), MappingProxyType(sources))


_default_registry: Registry | None = None
_default_lock = threading.Lock()


def get_registry() -> Registry:
    """The process-wide registry over installed plugins, loaded on first call."""
    global _default_registry
    with _default_lock:
        if _default_registry is None:
            _default_registry = Registry()
        return _default_registry.load_plugins()
