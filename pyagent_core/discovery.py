"""Plugin discovery: entry points of the ``pyagent`` group, the control variables, load reports.

A plugin is a module of ``@hookimpl`` functions named by an entry point::

    [project.entry-points.pyagent]
    my-plugin = "my_package.plugin"

Environment variables (DESIGN.md rule 6):

``PYAGENT_PLUGINS``
    comma-separated allow list of entry-point or distribution names; only these are loaded.
``PYAGENT_DISABLE_PLUGINS``
    comma-separated deny list of entry-point or distribution names.
``PYAGENT_DISABLE_PLUGIN_AUTOLOAD``
    when true, no entry point is loaded unless ``PYAGENT_PLUGINS`` names it.
``PYAGENT_TRACE_PLUGINS``
    when true, every hook call is traced to stderr.
"""

from __future__ import annotations

import importlib
import importlib.metadata as metadata
from collections.abc import Iterator, Mapping

import attrs
from packaging.utils import canonicalize_name

ENTRY_POINT_GROUP = "pyagent"
_TRUE = {"1", "true", "yes", "on"}


def env_flag(environ: Mapping[str, str], name: str) -> bool:
    """True when the environment variable ``name`` is set to 1/true/yes/on (any case)."""
    return environ.get(name, "").strip().lower() in _TRUE


def env_list(environ: Mapping[str, str], name: str) -> frozenset[str]:
    """The comma-separated names in ``name``, canonicalised (``My_Plugin`` == ``my-plugin``)."""
    raw = environ.get(name, "")
    return frozenset(canonicalize_name(part) for part in raw.split(",") if part.strip())


@attrs.frozen
class PluginControl:
    """The allow list, deny list, autoload and trace switches, read from the environment."""

    allow: frozenset[str] = frozenset()
    deny: frozenset[str] = frozenset()
    autoload: bool = True
    trace: bool = False

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> PluginControl:
        """Read ``PYAGENT_PLUGINS``, ``PYAGENT_DISABLE_PLUGINS``, ``..._AUTOLOAD``, ``..._TRACE_PLUGINS``."""
        return cls(
            allow=env_list(environ, "PYAGENT_PLUGINS"),
            deny=env_list(environ, "PYAGENT_DISABLE_PLUGINS"),
            autoload=not env_flag(environ, "PYAGENT_DISABLE_PLUGIN_AUTOLOAD"),
            trace=env_flag(environ, "PYAGENT_TRACE_PLUGINS"),
        )

    def blocked_reason(self, entry_name: str, dist: str | None) -> str | None:
        """Why the plugin must not be loaded, or ``None`` when it may be."""
        names = {canonicalize_name(entry_name)} | ({canonicalize_name(dist)} if dist else set())
        if names & self.deny:
            return "disabled by PYAGENT_DISABLE_PLUGINS"
        if self.allow and not names & self.allow:
            return "not in PYAGENT_PLUGINS"
        if not self.autoload and not names & self.allow:
            return "autoload disabled (PYAGENT_DISABLE_PLUGIN_AUTOLOAD) and not in PYAGENT_PLUGINS"
        return None


@attrs.frozen
class PluginEntry:
    """An entry point of the ``pyagent`` group with its distribution, before it is imported."""

    name: str
    module: str
    dist: str | None
    version: str | None

    def load(self) -> object:
        """Import the plugin module (its import errors propagate to the caller)."""
        return importlib.import_module(self.module)


def iter_entry_points() -> Iterator[PluginEntry]:
    """Every distinct entry point of the ``pyagent`` group, in a stable order.

    A distribution found twice on ``sys.path`` (editable plus built copy) yields its entry once.
    """
    seen: set[tuple[str | None, str, str]] = set()
    entries = []
    for ep in metadata.entry_points(group=ENTRY_POINT_GROUP):
        dist = ep.dist.metadata["Name"] if ep.dist is not None else None
        version = ep.dist.version if ep.dist is not None else None
        key = (canonicalize_name(dist) if dist else None, ep.name, ep.value)
        if key in seen:
            continue
        seen.add(key)
        entries.append(PluginEntry(ep.name, ep.value, dist, version))
    yield from sorted(entries, key=lambda e: (e.name, e.dist or ""))
