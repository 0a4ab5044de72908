"""Plugin scaffolding: fill the templates of one kind into a new distribution folder.

Templates live in ``templates/common`` (shared by every kind) and ``templates/<kind>`` (the
implementation and its conformance test). Placeholders use :class:`string.Template` syntax.
"""

from __future__ import annotations

import re
import string
from importlib import resources
from pathlib import Path

from pyagent_core.errors import ScaffoldError
from pyagent_core.kinds import KINDS, get_kind
from pyagent_core.types import NAME_RE

TEMPLATES = resources.files(__package__) / "templates"
# What a kind's implementation imports beyond pyagent-core.
KIND_DEPENDENCIES = {"attention": ("torch",), "sampler": ("torch",)}


def supported_kinds() -> list[str]:
    """Kinds that have implementation templates."""
    return sorted(k for k in KINDS if (TEMPLATES / k).is_dir())


def _class_name(name: str) -> str:
    return "".join(part.capitalize() for part in re.split(r"[-_.]", name) if part)


def scaffold_plugin(name: str, kind: str, directory: Path) -> Path:
    """Create ``directory/pyagent-<kind>-<name>`` and return its path.

    Raises :class:`ScaffoldError` for a bad name, a kind without templates, or an existing folder.
    """
    info = get_kind(kind)
    if not NAME_RE.match(name):
        raise ScaffoldError(
            f"plugin name {name!r} is invalid; use lowercase letters, digits, '.', '_' or '-', "
            "starting with a letter or digit"
        )
    if not (TEMPLATES / info.name).is_dir():
        raise ScaffoldError(
            f"no template for kind {info.name!r} yet; kinds with templates: {', '.join(supported_kinds())}"
        )
    dist = f"pyagent-{info.name.replace('_', '-')}-{name}".replace(".", "-")
    package = dist.replace("-", "_")
    target = directory / dist
    if target.exists():
        raise ScaffoldError(f"{target} already exists; choose another name or --dir")
    values = {
        "name": name, "dist": dist, "package": package, "kind": info.name, "hook": info.hook,
        "spec_class": info.spec_type.__name__, "class_name": _class_name(name),
        "kind_title": info.title,
        "dependencies": ", ".join(f'"{d}"' for d in ("pyagent-core", *KIND_DEPENDENCIES.get(info.name, ()))),
    }
    layout = {
        "pyproject.toml": "common/pyproject.toml.tmpl",
        "README.md": "common/README.md.tmpl",
        f"src/{package}/__init__.py": "common/__init__.py.tmpl",
        f"src/{package}/py.typed": None,
        f"src/{package}/plugin.py": f"{info.name}/plugin.py.tmpl",
        f"src/{package}/impl.py": f"{info.name}/impl.py.tmpl",
        f"tests/test_{package}.py": f"{info.name}/test_conformance.py.tmpl",
    }
    for relative, template in layout.items():
        path = target / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        text = "" if template is None else (TEMPLATES / template).read_text(encoding="utf-8")
        path.write_text(string.Template(text).substitute(values), encoding="utf-8")
    return target
