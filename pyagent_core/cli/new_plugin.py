"""``pyagent new-plugin``: scaffold a third-party plugin distribution for one kind."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path
from typing import Annotated

import typer

from pyagent_core.scaffold import scaffold_plugin


def new_plugin(
    name: Annotated[str, typer.Argument(help="Backend name, e.g. 'softcap' (lowercase, digits, - or _).")],
    kind: Annotated[str, typer.Option("--kind", help="Component kind, e.g. sampler.")],
    directory: Annotated[Path, typer.Option("--dir", help="Where to create the distribution folder.")] = Path(),
) -> None:
    """Create pyagent-<kind>-<name>/ with pyproject, entry point, spec, implementation, tests, README.

    The ``next:`` line runs pip, the listing and pytest with this interpreter (``python -m``), so they
    act on the environment this ``pyagent`` belongs to, whatever else is first on ``PATH``.
    """
    target = scaffold_plugin(name, kind, directory)
    python = shlex.quote(sys.executable)
    typer.echo(f"created {target}")
    typer.echo(f"next: {python} -m pip install -e {shlex.quote(f'{target}[test]')} && "
               f"{python} -m pyagent_core.cli list {kind} && {python} -m pytest {shlex.quote(str(target / 'tests'))}")


def register(app: typer.Typer) -> None:
    """Add ``new-plugin`` to ``app``."""
    app.command("new-plugin")(new_plugin)
