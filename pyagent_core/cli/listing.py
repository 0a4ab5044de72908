"""``pyagent plugins``, ``pyagent list`` and ``pyagent info``: what is installed and why."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Annotated, Any

import typer

from pyagent_core.commands import JsonFlag, print_json, print_table
from pyagent_core.kinds import KINDS, get_kind
from pyagent_core.registry import Backend, Registry, get_registry
from pyagent_core.types import ModelSpec

WIDE = 120
"""Columns from which ``pyagent list`` is a table; narrower (80 when piped), one block per backend."""


def console_width() -> int:
    """The width listings are laid out for: the terminal's, ``$COLUMNS``, or 80 when piped."""
    from rich.console import Console

    return int(Console().width)


def print_blocks(title: str, blocks: Iterable[tuple[str, Sequence[str]]]) -> None:
    """Print ``title``, then each block: its heading, and its lines indented below it, wrapped to the console's
    width between words (a word longer than a line is not split)."""
    import textwrap

    width = max(console_width(), 40)
    out = [title]
    for heading, lines in blocks:
        out.extend(textwrap.wrap(heading, width, initial_indent="  ", subsequent_indent="    ",
                                 break_long_words=False, break_on_hyphens=False))
        for line in lines:
            out.extend(textwrap.wrap(line, width, initial_indent="      ", subsequent_indent="      ",
                                     break_long_words=False, break_on_hyphens=False))
    typer.echo("\n".join(out))


def backend_record(registry: Registry, backend: Backend, default: Backend | None,
                   deep: bool) -> dict[str, Any]:
    """The JSON shape of one backend in ``pyagent list`` (a model's ``limits``: the engine features its
    architecture cannot use, and why)."""
    verdict = registry.availability(backend, deep=deep)
    limits = backend.spec.limits() if isinstance(backend.spec, ModelSpec) else {}
    return {
        "name": backend.name,
        "qualified_name": backend.qualified_name,
        "dist": backend.dist,
        "version": backend.version,
        "available": verdict.available,
        "reason": verdict.reason,
        "checked": verdict.checked,
        "default": backend is default,
        "priority": backend.spec.priority,
        "summary": backend.spec.summary,
        "limits": limits,
    }


def _summary(record: dict[str, Any]) -> str:
    """A backend's summary for the listing, with the engine features it cannot use and why."""
    limits = "; ".join(f"{feature} is off: {why}" for feature, why in record["limits"].items())
    return f"{record['summary']} {limits[0].upper()}{limits[1:]}." if limits else record["summary"]


def backend_matrix(registry: Registry, kinds: list[str]) -> str:
    """A markdown table of every backend of ``kinds``: distribution, priority, needs, summary.

    Capabilities are left to ``pyagent info`` (and ``--json``), which keeps the matrix of docs/backends.md short.
    """
    lines = ["| kind | backend | distribution | priority | requires | summary |",
             "|---|---|---|---|---|---|"]
    for kind in kinds:
        for b in registry.backends(kind):
            lines.append(f"| {kind} | `{b.name}` | {b.dist} | {b.spec.priority} | "
                         f"{', '.join(b.spec.requires)} | {b.spec.summary} |")
    return "\n".join(lines)


def plugins(json_out: JsonFlag = False) -> None:
    """Installed plugin distributions: name, version, kinds, hooks and status."""
    registry = get_registry()
    records: list[dict[str, Any]] = [
        {"name": p.name, "module": p.module, "dist": p.dist, "version": p.version,
         "status": p.status, "kinds": list(p.kinds), "hooks": list(p.hooks), "errors": list(p.errors)}
        for p in registry.plugins()
    ]
    if json_out:
        print_json({"plugins": records})
        return
    print_table(
        "pyagent plugins",
        ["plugin", "distribution", "version", "kinds", "hooks", "status"],
        [(r["name"], r["dist"], r["version"], ", ".join(r["kinds"]), ", ".join(r["hooks"]),
          r["status"] + "".join(f"\n{e}" for e in r["errors"])) for r in records],
    )


def list_backends(
    kind: Annotated[str | None, typer.Argument(help="Only this kind (e.g. sampler, attention).")] = None,
    check: Annotated[bool, typer.Option("--check", help="Import each backend and run its check.")] = False,
    json_out: JsonFlag = False,
    markdown: Annotated[bool, typer.Option("--markdown", help="Print the backend matrix of docs/backends.md.")] = False,
) -> None:
    """Backends per kind: name, distribution, availability (or why not), default, priority.

    A table from 120 columns; narrower, or piped, one block per backend.
    """
    registry = get_registry()
    kinds = [get_kind(kind).name] if kind else list(KINDS)
    result = {}
    for name in kinds:
        default = registry.default(name)
        result[name] = [backend_record(registry, b, default, check) for b in registry.backends(name)]
    problems = registry.problems()
    if markdown:
        typer.echo(backend_matrix(registry, kinds))
        return
    if json_out:
        print_json({"kinds": result, "problems": problems})
        return
    wide = console_width() >= WIDE
    for name, records in result.items():
        if not records:
            typer.echo(f"{KINDS[name].plural} ({name}): {registry.blocked_hint(name) or 'none installed'}")
            continue
        title = f"{KINDS[name].plural} ({name})"
        if wide:
            print_table(
                title, ["name", "distribution", "available", "default", "priority", "summary"],
                [(r["name"], f"{r['dist']} {r['version']}", "yes" if r["available"] else f"no: {r['reason']}",
                  "*" if r["default"] else "", r["priority"], _summary(r)) for r in records],
            )
            continue
        print_blocks(title, [
            (f"{r['name']}{' (default)' if r['default'] else ''}: {r['dist']} {r['version']}, priority "
             f"{r['priority']}{'' if r['available'] else ', NOT AVAILABLE'}",
             [_summary(r), *([] if r["available"] else [f"not available: {r['reason']}"])]) for r in records])
    for problem in problems:
        typer.echo(f"warning: {problem}", err=True)


def info(
    kind: Annotated[str, typer.Argument(help="Component kind, e.g. sampler.")],
    name: Annotated[str, typer.Argument(help="Backend name, or DIST:NAME.")],
    json_out: JsonFlag = False,
) -> None:
    """Everything about one backend: summary, capabilities, options, requirements, install hint."""
    registry = get_registry()
    backend = registry.get(kind, name)
    spec = backend.spec
    verdict = registry.availability(backend)
    record: dict[str, Any] = {
        "kind": backend.kind, "name": spec.name, "qualified_name": backend.qualified_name,
        "dist": backend.dist, "version": backend.version, "impl": spec.impl,
        "summary": spec.summary, "description": spec.description, "priority": spec.priority,
        "available": verdict.available, "reason": verdict.reason,
        "capabilities": spec.capabilities(),
        "options": {
            key: {"type": opt.type_name, "default": opt.default, "help": opt.help,
                  "choices": list(opt.choices), "min": opt.min, "max": opt.max,
                  "request": opt.request, "request_help": opt.parameter_help if opt.request else ""}
            for key, opt in spec.options.items()
        },
        "requires": list(spec.requires), "install_hint": spec.install_hint,
        "select_with": _select_with(backend),
    }
    if json_out:
        print_json(record)
        return
    print_table(
        f"{KINDS[backend.kind].title} {spec.name}", ["field", "value"],
        [(k, v) for k, v in record.items() if k not in ("options", "capabilities")]
        + [(f"capability {k}", v) for k, v in record["capabilities"].items()],
    )
    print_table(
        "options", ["option", "type", "default", "range", "per request", "help"],
        [(k, o["type"], o["default"], _range(o), "yes" if o["request"] else "", o["help"])
         for k, o in record["options"].items()],
    )


def _select_with(backend: Backend) -> str:
    """How a user selects ``backend``: ``pyagent use`` and the variable, or why the kind's selection
    cannot name it."""
    kind = KINDS[backend.kind]
    if not kind.selectable(backend.spec):
        return f"{backend.name} {kind.not_selectable}"
    return f"pyagent use {backend.kind} {backend.name}, or {kind.env_var}={backend.name}"


def _range(option: dict[str, Any]) -> str:
    if option["choices"]:
        return " | ".join(map(str, option["choices"]))
    low = "" if option["min"] is None else f"{option['min']} <= "
    high = "" if option["max"] is None else f" <= {option['max']}"
    return f"{low}x{high}" if low or high else ""


def register(app: typer.Typer) -> None:
    """Add the listing commands to ``app``."""
    app.command("plugins")(plugins)
    app.command("list")(list_backends)
    app.command("info")(info)
