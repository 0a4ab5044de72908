"""``pyagent new-plugin``: scaffold a third-party plugin distribution for one kind."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from pyagent_core.scaffold import scaffold_plugin


def new_plugin(
    name: Annotated[str, typer.Argument(help="Backend name, e.g. 'softcap' (lowercase, digits, - or _).")],
    kind: Annotated[str, typer.Option("--kind", help="Component kind, e.g. sampler.")],
    directory: Annotated[Path, typer.Option("--dir", help="Where to create the distribution folder.")] = Path(),
) -> None:
    """Create pyagent-<kind>-<name>/ with pyproject, entry point, spec, implementation, tests, README."""
    target = scaffold_plugin(name, kind, directory)
    typer.echo(f"created {target}")
    typer.echo(f"next: pip install -e {target} && pyagent list {kind} && pytest {target / 'tests'}")


def register(app: typer.Typer) -> None:
    """Add ``new-plugin`` to ``app``."""
    app.command("new-plugin")(new_plugin)
