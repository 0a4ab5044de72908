"""Plugin scaffolding: fill the templates of one kind into a new distribution folder.

Templates live in ``templates/common`` (shared by every kind) and ``templates/<kind>``: the
registration module (``plugin.py.tmpl``), a small working implementation (``impl.py.tmpl``), its
conformance test (``test_conformance.py.tmpl``) and the README paragraph saying what that
implementation does (``about.md.tmpl``). Placeholders use :class:`string.Template` syntax; the values
are those of :func:`template_values`. Only ``$about`` spans lines, and only the README uses it, so
a rendered module keeps its template's line numbers.

The same templates double as the reference implementations of the kit meta-tests, which load them
in memory through :func:`pyagent_core.testing.scaffolded.import_template`.
"""

from __future__ import annotations

import keyword
import re
import string
from collections.abc import Mapping
from importlib import resources
from pathlib import Path

import attrs

from pyagent_core.errors import ScaffoldError
from pyagent_core.kinds import KINDS, get_kind
from pyagent_core.testing import KIT_EXTRAS
from pyagent_core.types import NAME_RE
from pyagent_core.version import compatible_requirement

TEMPLATES = resources.files(__package__) / "templates"
# What a kind's implementation needs beyond pyagent-core, with the lower bounds the repository tests from (grammar:
# its token bitmasks are torch tensors; model: the shared decoder layers it is declared on).
KIND_DEPENDENCIES = {"attention": ("torch>=2.13",), "grammar": ("torch>=2.13",), "mixer": ("torch>=2.13",),
                     "sampler": ("torch>=2.13",),
                     "model": ("torch>=2.13", "gguf>=0.17", compatible_requirement("pyagent-model-base"))}


@attrs.frozen
class TemplateFile:
    """One file of a scaffolded distribution.

    Attributes:
        path: where it goes, relative to the distribution folder.
        template: its template, relative to :data:`TEMPLATES`; ``None`` for an empty file.
        module: its import name when it is a Python module, else ``None``.
    """

    path: str
    template: str | None
    module: str | None = None


def supported_kinds() -> list[str]:
    """Kinds that have implementation templates."""
    return sorted(k for k in KINDS if (TEMPLATES / k).is_dir())


def _class_name(name: str) -> str:
    return "".join(part.capitalize() for part in re.split(r"[-_.]", name) if part)


def _check_class_name(class_name: str, name: str, kind: str) -> None:
    """Raise :class:`ScaffoldError` if ``class_name`` is no Python class name or is a name the kind's
    modules already use (``tool-call`` would give ``ToolCall``, shadowing the interface's class)."""
    word = re.compile(rf"\b{re.escape(class_name)}\b")
    clashes = [t.name for t in (TEMPLATES / kind).iterdir()
               if t.name.endswith(".py.tmpl") and word.search(t.read_text(encoding="utf-8"))]
    usable = class_name.isidentifier() and not keyword.iskeyword(class_name)
    if clashes or not usable:
        why = f"which the {kind} templates already use ({', '.join(clashes)})" if usable else "not a Python name"
        raise ScaffoldError(
            f"plugin name {name!r} gives the implementation class name {class_name!r}, {why}; choose another name"
        )


def render(template: str, values: Mapping[str, str]) -> str:
    """The text of ``TEMPLATES / template`` with ``values`` substituted for its placeholders."""
    text = (TEMPLATES / template).read_text(encoding="utf-8")
    return string.Template(text).substitute(values)


def template_values(name: str, kind: str) -> dict[str, str]:
    """Placeholder values for a backend ``name`` of ``kind`` (a kind name, plural or alias).

    Raises :class:`ScaffoldError` for a bad name (including one whose class name is no Python name or
    is already used by the kind's templates) or a kind without templates.
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
    class_name = _class_name(name)
    _check_class_name(class_name, name, info.name)
    dist = f"pyagent-{info.name.replace('_', '-')}-{name}".replace(".", "-")
    values = {
        "name": name, "dist": dist, "package": dist.replace("-", "_"), "kind": info.name,
        "hook": info.hook, "spec_class": info.spec_type.__name__, "class_name": class_name,
        "kind_title": info.title,
        "dependencies": ", ".join(f'"{d}"' for d in (compatible_requirement(), *KIND_DEPENDENCIES.get(info.name, ()))),
        "test_dependencies": f'"{compatible_requirement(f"pyagent-core[{KIT_EXTRAS[info.name]}]")}"',
        "install_hint": f"pip install ./{dist} (from the folder that holds it: {dist} is on no package index)",
    }
    values["about"] = render(f"{info.name}/about.md.tmpl", values).strip()
    return values


def distribution_files(values: Mapping[str, str]) -> list[TemplateFile]:
    """The files of the distribution :func:`template_values` describes, each module after those it imports."""
    package, kind = values["package"], values["kind"]
    return [
        TemplateFile("pyproject.toml", "common/pyproject.toml.tmpl"),
        TemplateFile("README.md", "common/README.md.tmpl"),
        TemplateFile(f"src/{package}/__init__.py", "common/__init__.py.tmpl", package),
        TemplateFile(f"src/{package}/py.typed", None),
        TemplateFile(f"src/{package}/impl.py", f"{kind}/impl.py.tmpl", f"{package}.impl"),
        TemplateFile(f"src/{package}/plugin.py", f"{kind}/plugin.py.tmpl", f"{package}.plugin"),
        TemplateFile(f"tests/test_{package}.py", f"{kind}/test_conformance.py.tmpl", f"test_{package}"),
    ]


def scaffold_plugin(name: str, kind: str, directory: Path) -> Path:
    """Create ``directory/pyagent-<kind>-<name>`` and return its path.

    Raises :class:`ScaffoldError` for a bad name, a kind without templates, or an existing folder.
    """
    values = template_values(name, kind)
    target = directory / values["dist"]
    if target.exists():
        raise ScaffoldError(f"{target} already exists; choose another name or --dir")
    for file in distribution_files(values):
        path = target / file.path
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("" if file.template is None else render(file.template, values), encoding="utf-8")
    return target
