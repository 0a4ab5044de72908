"""The ``pyagent`` command line: list, explain, select, check and scaffold backends.

The core's commands need no engine. Other distributions add theirs through the
``pyagent_register_commands`` hook (pyagent-engine adds ``generate``, ``chat`` and ``bench``).
Importing this package loads neither torch nor any backend; commands that need them import
them inside their bodies.
"""

from __future__ import annotations

import sys

import typer

from pyagent_core.cli import doctor, listing, new_plugin, parse, selection
from pyagent_core.commands import error
from pyagent_core.errors import PyagentError

app = typer.Typer(
    name="pyagent",
    help="List, explain, select and benchmark pyagent plugins.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
for module in (listing, selection, doctor, new_plugin, parse):
    module.register(app)


_plugin_commands_added = False


def full_app() -> typer.Typer:
    """The command line with every installed plugin's commands (``pyagent_register_commands``), added once.

    A plugin whose hook raises is reported on stderr; the other commands still work.
    """
    global _plugin_commands_added
    if not _plugin_commands_added:
        from pyagent_core.registry import get_registry

        _plugin_commands_added = True
        registry = get_registry()
        for plugin, exc in registry.call_hook("pyagent_register_commands", app=app):
            error(f"plugin {plugin!r} failed to add its commands: {type(exc).__name__}: {exc}")
        for problem in registry.control_problems():  # a typo there hides commands and backends
            typer.echo(f"warning: {problem}", err=True)
    return app


def main() -> None:
    """Console entry point: run the app, printing pyagent errors without a traceback."""
    try:
        full_app()()
    except PyagentError as exc:
        error(str(exc))
        sys.exit(2)
