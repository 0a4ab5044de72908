"""Configuration files: the project's ``pyagent.toml`` and the user's ``config.toml``.

Both have the same shape: one table per kind naming the selected backend, with one sub-table per
backend holding its options::

    [attention]
    backend = "paged"

    [attention.paged]
    threads = 2

and one more table, ``[engine]``, of settings the host engine reads (plain values: the reference engine
reads ``precision``), which :meth:`Settings.engine_setting` looks up.

The project file is the nearest ``pyagent.toml`` in the working directory or its parents. The user
file is ``$PYAGENT_USER_CONFIG``, else ``$XDG_CONFIG_HOME/pyagent/config.toml``, else
``~/.config/pyagent/config.toml``.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs
import tomli_w

from pyagent_core.errors import ConfigError
from pyagent_core.kinds import KINDS

PROJECT_FILE = "pyagent.toml"
BACKEND_KEY = "backend"
#: The table of settings the host engine reads (not a component kind).
ENGINE_TABLE = "engine"


def find_project_file(start: Path) -> Path | None:
    """The nearest ``pyagent.toml`` at ``start`` or above it, or ``None``."""
    for folder in (start, *start.parents):
        candidate = folder / PROJECT_FILE
        if candidate.is_file():
            return candidate
    return None


def user_config_path(environ: Mapping[str, str]) -> Path:
    """Where the user-level configuration lives (it need not exist)."""
    if environ.get("PYAGENT_USER_CONFIG"):
        return Path(environ["PYAGENT_USER_CONFIG"])
    base = environ.get("XDG_CONFIG_HOME") or str(Path(environ.get("HOME", "~")).expanduser() / ".config")
    return Path(base) / "pyagent" / "config.toml"


@attrs.frozen
class ConfigFile:
    """One parsed configuration file; ``label`` is ``"project"`` or ``"user"``."""

    path: Path
    label: str
    data: Mapping[str, Any]

    @classmethod
    def read(cls, path: Path, label: str) -> ConfigFile:
        """Parse and check ``path``; a missing file reads as empty."""
        if not path.is_file():
            return cls(path, label, {})
        try:
            data = tomllib.loads(path.read_text(encoding="utf-8"))
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
            raise ConfigError(f"cannot parse {label} config {path}: {exc}; fix or delete the file") from None
        _check_shape(path, data)
        return cls(path, label, data)

    @property
    def source(self) -> str:
        """How ``pyagent config`` names values coming from this file."""
        return f"{self.label} file {self.path}"

    def backend(self, kind: str) -> str | None:
        """The backend this file selects for ``kind``, if any."""
        value = self.data.get(kind, {}).get(BACKEND_KEY)
        return str(value) if value is not None else None

    def options(self, kind: str, name: str) -> dict[str, Any]:
        """The option table ``[kind.name]`` of this file (empty when absent)."""
        return dict(self.data.get(kind, {}).get(name, {}))

    def engine_setting(self, key: str) -> Any:
        """The value of ``key`` in this file's ``[engine]`` table, or ``None``."""
        return self.data.get(ENGINE_TABLE, {}).get(key)


def _check_shape(path: Path, data: Mapping[str, Any]) -> None:
    for kind, table in data.items():
        if kind not in KINDS and kind != ENGINE_TABLE:
            raise ConfigError(
                f"{path}: unknown table [{kind}]; tables are component kinds ({', '.join(KINDS)}) and "
                f"[{ENGINE_TABLE}]"
            )
        if not isinstance(table, dict):
            raise ConfigError(f"{path}: [{kind}] must be a table, got {table!r}")
        if kind == ENGINE_TABLE:
            for key, value in table.items():
                if not isinstance(value, str | int | float | bool):
                    raise ConfigError(f"{path}: {ENGINE_TABLE}.{key} = {value!r} must be a string, number or "
                                      "boolean")
            continue
        for key, value in table.items():
            if key == BACKEND_KEY:
                if not isinstance(value, str):
                    raise ConfigError(f"{path}: {kind}.backend must be a string, got {value!r}")
            elif not isinstance(value, dict):
                raise ConfigError(
                    f"{path}: {kind}.{key} = {value!r} is not allowed; write "
                    f"'{kind}.backend = \"NAME\"' or an option table [{kind}.{key}]"
                )


def write_selection(path: Path, kind: str, name: str, options: Mapping[str, Any]) -> None:
    """Persist ``name`` as the backend of ``kind`` in ``path`` and merge ``options`` into its table.

    Other tables and keys of the file are kept.
    """
    current = dict(ConfigFile.read(path, "target").data)
    table = dict(current.get(kind, {}))
    table[BACKEND_KEY] = name
    if options:
        table[name] = {**table.get(name, {}), **options}
    current[kind] = table
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(tomli_w.dumps(current), encoding="utf-8")


@attrs.frozen
class Settings:
    """The environment plus the project and user files, in precedence order."""

    environ: Mapping[str, str]
    project: ConfigFile | None
    user: ConfigFile

    @classmethod
    def load(cls, environ: Mapping[str, str] | None = None, cwd: Path | None = None) -> Settings:
        """Read the files that apply to ``cwd`` (default: the working directory)."""
        env = dict(os.environ if environ is None else environ)
        project_path = find_project_file(cwd or Path.cwd())
        project = ConfigFile.read(project_path, "project") if project_path else None
        return cls(env, project, ConfigFile.read(user_config_path(env), "user"))

    def files(self) -> list[ConfigFile]:
        """The files in precedence order, highest first."""
        return [f for f in (self.project, self.user) if f is not None]

    def selected(self, kind: str) -> tuple[str, str] | None:
        """``(name, source)`` of the backend chosen for ``kind`` by environment or files, if any."""
        env_var = KINDS[kind].env_var
        if self.environ.get(env_var, "").strip():
            return self.environ[env_var].strip(), f"environment {env_var}"
        for file in self.files():
            name = file.backend(kind)
            if name:
                return name, file.source
        return None

    def engine_setting(self, key: str, env_var: str) -> tuple[Any, str] | None:
        """``(value, source)`` of the engine setting ``key`` from the environment variable ``env_var``
        (a string) or the files' ``[engine]`` tables, highest precedence first; ``None`` when unset.
        The engine validates the value (and names the source in its error)."""
        if self.environ.get(env_var, "").strip():
            return self.environ[env_var].strip(), f"environment {env_var}"
        for file in self.files():
            value = file.engine_setting(key)
            if value is not None:
                return value, file.source
        return None

    def option_layers(self, kind: str, name: str) -> list[tuple[dict[str, Any], str]]:
        """Option tables for backend ``name`` with their sources, lowest precedence first."""
        return [(file.options(kind, name), file.source) for file in reversed(self.files())]
