"""``pyagent doctor``: what this environment can run, without importing any backend."""

from __future__ import annotations

import importlib.metadata as metadata
import platform
from typing import Annotated, Any

import attrs
import typer

from pyagent_core import __version__
from pyagent_core.commands import JsonFlag, error, print_json, print_table
from pyagent_core.records import DoctorCheck
from pyagent_core.registry import STATUS_FAILED, Registry, get_registry

OPTIONAL_DISTS = (
    "torch", "numpy", "cffi", "gguf", "safetensors", "tokenizers", "transformers",
    "xgrammar", "llguidance", "lm-format-enforcer",
)


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def plugin_checks(registry: Registry, hook: str = "pyagent_doctor_checks", **kwargs: Any) -> list[DoctorCheck]:
    """Every plugin's rows from ``hook`` (``pyagent_doctor_checks``, or ``pyagent_check_model`` with its
    ``path``); a plugin whose hook fails gets a failed row instead."""
    results, failures = registry.gather_hook(hook, **kwargs)
    rows: list[DoctorCheck] = []
    for plugin, checks in results:
        if isinstance(checks, list) and all(isinstance(check, DoctorCheck) for check in checks):
            rows.extend(checks)
        else:
            rows.append(DoctorCheck(f"plugin {plugin}", False, "its doctor checks returned something other than "
                                    f"a list of DoctorCheck: {checks!r}"))
    for plugin, exc in failures:
        rows.append(DoctorCheck(f"plugin {plugin}", False, f"its doctor checks raised {type(exc).__name__}: {exc}"))
    return rows


def doctor(json_out: JsonFlag = False, model: Annotated[str | None, typer.Option(
        "--model", help="Also say whether this .gguf file or checkpoint folder can run here, and why not.")] = None,
           ) -> None:
    """Report Python, pyagent, optional libraries, the plugins' own checks (kernels, model...) and problems.

    With --model, the plugins' checks of that model follow (architecture served, block types,
    tokenizer); the command exits 1 when one fails.
    """
    registry = get_registry()
    failed = [p.name for p in registry.plugins() if p.status == STATUS_FAILED]
    checks = plugin_checks(registry)
    model_checks = [] if model is None else plugin_checks(registry, "pyagent_check_model", path=model)
    if model is not None and not model_checks:
        model_checks = [DoctorCheck("model", False, "no installed plugin checks models",
                                    "install pyagent-engine (it implements pyagent_check_model)")]
    checks += model_checks
    report: dict[str, Any] = {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "pyagent_core": __version__,
        "libraries": {dist: _version(dist) for dist in OPTIONAL_DISTS},
        "checks": [attrs.asdict(check) for check in checks],
        "plugins": {"loaded": sum(p.status == "ok" for p in registry.plugins()), "failed": failed},
        "problems": registry.problems(),
    }
    if json_out:
        print_json(report)
        if not all(check.ok for check in model_checks):
            raise typer.Exit(1)
        return
    rows: list[tuple[str, Any]] = [
        ("python", f"{report['python']} on {report['platform']}"),
        ("pyagent-core", __version__),
        *((dist, version or "not installed") for dist, version in report["libraries"].items()),
        *((check.name, check.detail if check.ok else f"{check.detail}; {check.hint}" if check.hint else check.detail)
          for check in checks),
        ("plugins", f"{report['plugins']['loaded']} loaded, {len(failed)} failed"),
    ]
    print_table("pyagent doctor", ["check", "result"], rows)
    for check in checks:
        if not check.ok:
            error(f"{check.name}: {check.detail}" + (f"; {check.hint}" if check.hint else ""))
    for problem in report["problems"]:
        typer.echo(f"warning: {problem}", err=True)
    if not all(check.ok for check in model_checks):
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    """Add ``doctor`` to ``app``."""
    app.command("doctor")(doctor)
