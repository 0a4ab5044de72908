"""The ``pyagent`` command line: list, explain, select, check and scaffold backends.

Importing this package loads neither torch nor any backend; commands that need them import
them inside their bodies.
"""

from __future__ import annotations

import sys

import typer

from pyagent_core.cli import bench, doctor, generate, listing, new_plugin, parse, selection
from pyagent_core.cli.output import error
from pyagent_core.errors import PyagentError

app = typer.Typer(
    name="pyagent",
    help="List, explain, select and benchmark pyagent plugins.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
for module in (listing, selection, generate, doctor, new_plugin, parse):
    module.register(app)
app.add_typer(bench.app, name="bench")


def _add_plugin_commands() -> None:
    from pyagent_core.registry import get_registry

    for plugin, exc in get_registry().call_hook("pyagent_register_commands", app=app):
        error(f"plugin {plugin!r} failed to add its commands: {type(exc).__name__}: {exc}")


def main() -> None:
    """Console entry point: run the app, printing pyagent errors without a traceback."""
    try:
        _add_plugin_commands()
        app()
    except PyagentError as exc:
        error(str(exc))
        sys.exit(2)
