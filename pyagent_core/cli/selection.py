"""``pyagent use`` and ``pyagent config``: persist a choice, show the effective selection."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from pyagent_core.commands import JsonFlag, print_json, print_table
from pyagent_core.config import PROJECT_FILE, user_config_path, write_selection
from pyagent_core.errors import PyagentError
from pyagent_core.kinds import KINDS
from pyagent_core.options import parse_assignments
from pyagent_core.registry import get_registry


def use(
    kind: Annotated[str, typer.Argument(help="Component kind, e.g. attention.")],
    name: Annotated[str, typer.Argument(help="Backend name, or DIST:NAME.")],
    opt: Annotated[list[str] | None, typer.Option("--opt", help="Backend option KEY=VALUE (repeatable).")] = None,
    user: Annotated[bool, typer.Option("--user", help="Write the user config, not pyagent.toml.")] = False,
) -> None:
    """Select a backend (and its options) in pyagent.toml, or in the user config with --user."""
    registry = get_registry()
    raw = parse_assignments(opt or [])
    selection = registry.select(kind, name, raw)
    backend = selection.backend
    registry.check_selectable(backend, "`pyagent use`")
    settings = registry.settings
    if user:
        path = user_config_path(registry.environ)
    else:
        path = settings.project.path if settings.project else Path.cwd() / PROJECT_FILE
    chosen = {key: selection.options[key] for key in raw}
    write_selection(path, backend.kind, name, chosen)
    typer.echo(f"{backend.kind}: {name} ({backend.dist} {backend.version}) written to {path}")
    overriding = settings.environ.get(KINDS[backend.kind].env_var)
    if overriding:
        typer.echo(f"note: {KINDS[backend.kind].env_var}={overriding} is set and takes precedence", err=True)


def config(json_out: JsonFlag = False) -> None:
    """The effective selection per kind and where each value came from."""
    registry = get_registry()
    result: dict[str, Any] = {}
    for kind, handle in KINDS.items():
        try:
            chosen = registry.selected(kind)
        except PyagentError as exc:  # one bad kind must not hide the others
            result[kind] = {"backend": None, "error": str(exc)}
            continue
        if chosen is None:
            result[kind] = {"backend": None, "source": handle.no_default, "options": {}}
            continue
        result[kind] = {
            "backend": chosen.backend.name, "dist": chosen.backend.dist, "source": chosen.source,
            "options": {k: {"value": v, "source": chosen.option_sources[k]}
                        for k, v in chosen.options.items()},
        }
    files = {f.label: str(f.path) for f in registry.settings.files()}
    if json_out:
        print_json({"selection": result, "files": files})
        return
    print_table(
        "effective selection", ["kind", "backend", "from", "options"],
        [(kind, r["backend"] or "-", r.get("source") or r.get("error"),
          ", ".join(f"{k}={o['value']} ({o['source']})" for k, o in r.get("options", {}).items()))
         for kind, r in result.items()],
    )
    for label, path in files.items():
        typer.echo(f"{label} file: {path}")


def register(app: typer.Typer) -> None:
    """Add the selection commands to ``app``."""
    app.command("use")(use)
    app.command("config")(config)
