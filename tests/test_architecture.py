"""Who may import whom, checked by import-linter with contracts derived from the repository's pyprojects.

The rules (docs/architecture.md): pyagent-core imports no other pyagent distribution, and torch
only in its conformance kit and inside the interfaces' helpers that are handed tensors;
pyagent-kernels imports nothing from pyagent; the engine reaches plugins through the registry, never
by import (of the libraries, only those it declares: the sampler host); a plugin or library imports
only the pyagent distributions its pyproject declares (and what they declare), and never a plugin. The
contracts are written from the pyprojects on disk, so a new plugin is covered the day it is added and a
dependency that is not declared is an import error here.

Inside the engine, a layers contract (:data:`ENGINE_LAYERS`) keeps the subpackages acyclic, type-checking
imports included; docs/architecture.md shows the same layers and is checked against the tree here.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[1]


def package_of(dist: str) -> str:
    """The import package of a repository distribution: ``pyagent-spec-ngram`` -> ``pyagent_spec_ngram``."""
    return canonicalize_name(dist).replace("-", "_")


def distributions(pattern: str) -> dict[str, set[str]]:
    """Import package -> the pyagent packages it declares (as dependencies or in an extra, such as
    pyagent-vllm's ``bench``), for pyprojects matching ``pattern``."""
    found = {}
    for path in sorted(ROOT.glob(pattern)):
        project = tomllib.loads(path.read_text(encoding="utf-8"))["project"]
        extras = [r for extra in project.get("optional-dependencies", {}).values() for r in extra]
        declared = {package_of(Requirement(r).name) for r in [*project.get("dependencies", []), *extras]}
        found[package_of(project["name"])] = {d for d in declared if d.startswith("pyagent_")}
    return found


PLUGINS = distributions("plugins/*/*/pyproject.toml")
LIBS = distributions("libs/*/pyproject.toml")
INTEGRATIONS = distributions("integrations/*/pyproject.toml")
CORE, KERNELS, ENGINE = "pyagent_core", "pyagent_kernels", "pyagent_engine"
DECLARED = {**PLUGINS, **LIBS, **INTEGRATIONS, **distributions("engine/pyproject.toml")}
EVERYTHING = {CORE, KERNELS, ENGINE, *PLUGINS, *LIBS, *INTEGRATIONS}


def reachable(package: str) -> set[str]:
    """What ``package`` may reach: what it declares, and what those declare, and so on (import-linter
    follows indirect imports: the engine reaches pyagent-sampler-base through the sampler host)."""
    found: set[str] = set()
    todo = [package]
    while todo:
        for dependency in DECLARED.get(todo.pop(), set()) - found:
            found.add(dependency)
            todo.append(dependency)
    return found


def forbidden(name: str, source: str, banned: set[str], *extra: str) -> str:
    modules = "\n    ".join(sorted(banned))
    return f"[importlinter:contract:{name}]\nname = {name}\ntype = forbidden\nsource_modules = {source}\n" \
           f"forbidden_modules =\n    {modules}\n" + "".join(line + "\n" for line in extra)


def contracts() -> str:
    """The import-linter configuration for the repository as it is on disk."""
    sections = [
        forbidden("core-imports-no-other-distribution", CORE, EVERYTHING - {CORE}),
        # torch only in the conformance kit, and inside the interfaces' tensor helpers (functions that
        # are handed tensors, so torch is there); tests/test_wheels.py imports the rest without it
        forbidden("core-imports-torch-only-in-its-kit-and-tensor-helpers", CORE, {"torch", "numpy"},
                  "ignore_imports =\n    pyagent_core.testing.** -> torch\n"
                  "    pyagent_core.interfaces.attention -> torch\n    pyagent_core.interfaces.grammar -> torch\n"
                  "    pyagent_core.interfaces.mixer -> torch\n    pyagent_core.interfaces.cache -> torch"),
        forbidden("kernels-import-nothing-from-pyagent", KERNELS, EVERYTHING - {KERNELS}),
        # the libraries the engine declares (the sampler host, and what it declares) it imports
        forbidden("engine-reaches-plugins-through-the-registry", ENGINE,
                  set(PLUGINS) | (set(LIBS) - reachable(ENGINE)) | set(INTEGRATIONS)),
    ]
    for package in {**PLUGINS, **LIBS, **INTEGRATIONS}:
        allowed = {package, CORE, KERNELS} | reachable(package)
        banned = EVERYTHING - allowed
        banned |= set(PLUGINS) - {package}  # never another plugin, declared or not
        sections.append(forbidden(f"{package}-imports-only-what-it-declares", package, banned))
    header = ("[importlinter]\nroot_packages =\n    " + "\n    ".join(sorted(EVERYTHING))
              + "\ninclude_external_packages = True\nexclude_type_checking_imports = True\n")
    return header + "\n" + "\n".join(sections)


ENGINE_LAYERS = (
    "plugin",
    "cli | testing",
    "server | benchmarks",
    "api | kvsim | metrics",
    "core",
    "stages",
    "spec",
    "sampling | structured | scheduling",
    "kv | models",
    "requests",
)
"""The engine's subpackages, top to bottom: a layer imports only the layers below it, and the packages of
one layer (``|``) never import each other."""


def engine_layers() -> str:
    """The import-linter configuration of the layers contract inside the engine.

    Unlike the contracts between distributions, imports made for type checkers count here: a cycle
    between annotations is a cycle in what a reader must hold in mind. The contract is exhaustive, so
    a new subpackage fails until it is given a layer.
    """
    layers = "\n    ".join(ENGINE_LAYERS)
    return (f"[importlinter]\nroot_packages =\n    {ENGINE}\nexclude_type_checking_imports = False\n\n"
            f"[importlinter:contract:engine-layers]\nname = engine-layers\ntype = layers\n"
            f"containers =\n    {ENGINE}\nexhaustive = True\nlayers =\n    {layers}\n")


def run_lint_imports(config_text: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """``lint-imports`` on ``config_text`` (skips when import-linter is not installed)."""
    config = tmp_path / "importlinter.ini"
    config.write_text(config_text, encoding="utf-8")
    lint = Path(sys.executable).with_name("lint-imports")
    if not lint.exists():
        pytest.skip("import-linter is not installed (it is in requirements-dev.txt)")
    return subprocess.run([str(lint), "--no-cache", "--no-logo", str(config)], capture_output=True, text=True,
                          cwd=ROOT, timeout=600)


def test_every_distribution_of_the_repository_is_covered():
    assert len(PLUGINS) >= 17 and INTEGRATIONS
    on_disk = {p.name for p in ROOT.glob("plugins/*/*/src/*") if p.is_dir() and not p.name.endswith(".egg-info")}
    assert on_disk == set(PLUGINS), "every plugin's package is named after its distribution"


def test_import_contracts_hold(tmp_path):
    result = run_lint_imports(contracts(), tmp_path)
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-2000:]


def test_engine_layers_hold(tmp_path):
    result = run_lint_imports(engine_layers(), tmp_path)
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-2000:]


ARCHITECTURE = ROOT / "docs" / "architecture.md"
ENGINE_SRC = ROOT / "engine" / "src" / ENGINE


def engine_subpackages() -> set[str]:
    """The engine's subpackages on disk (folders with an ``__init__.py``)."""
    return {p.parent.name for p in ENGINE_SRC.glob("*/__init__.py")}


def distribution_folders() -> set[Path]:
    """Every folder of the repository, up to ``plugins/<kind>/<dist>``, holding a pyproject.toml (the root's
    is the core's); hidden folders (virtual environments) are left out."""
    found = (p for depth in range(4) for p in ROOT.glob("/".join(["*"] * depth + ["pyproject.toml"])))
    return {p.parent for p in found if not any(part.startswith(".") for part in p.relative_to(ROOT).parts)}


def doc_names() -> list[str]:
    """Every inline code span of docs/architecture.md."""
    return re.findall(r"`([^`\n]+)`", ARCHITECTURE.read_text(encoding="utf-8"))


def engine_name_exists(name: str) -> bool:
    """Whether ``pyagent_engine.a.b`` is a module of the engine, or ``pyagent_engine.a.b.C`` a name defined in one."""
    parts = name.split(".")[1:]
    for module, attribute in ((parts, None), (parts[:-1], parts[-1])):
        path = ENGINE_SRC.joinpath(*module)
        source = path.with_suffix(".py") if path.with_suffix(".py").exists() else path / "__init__.py"
        if source.exists() and (attribute is None
                                or re.search(rf"^(class|def) {attribute}\b|^{attribute} =", source.read_text(), re.M)):
            return True
    return False


def test_architecture_doc_names_every_distribution_and_engine_subpackage():
    names = set(doc_names())
    unnamed = []
    for folder in sorted(distribution_folders()):
        dist = tomllib.loads((folder / "pyproject.toml").read_text(encoding="utf-8"))["project"]["name"]
        if dist not in names:
            unnamed.append(f"distribution {dist} ({folder.relative_to(ROOT)})")
        if folder.parent.parent.name == "plugins" and f"plugins/{folder.parent.name}/" not in names:
            unnamed.append(f"plugin folder plugins/{folder.parent.name}/")
    unnamed += [f"engine subpackage {ENGINE}.{sub}" for sub in sorted(engine_subpackages())
                if f"{ENGINE}.{sub}" not in names]
    assert not unnamed, "docs/architecture.md does not name: " + ", ".join(unnamed)


def test_everything_the_architecture_doc_names_exists():
    dists = {tomllib.loads((folder / "pyproject.toml").read_text(encoding="utf-8"))["project"]["name"]
             for folder in distribution_folders()}
    missing = []
    for name in doc_names():
        if re.fullmatch(r"pyagent-[a-z0-9-]+", name) and name not in dists:
            missing.append(f"distribution {name}")
        elif re.fullmatch(r"(plugins|libs|integrations|engine|csrc|tests|docs)/[\w./-]*", name) and "<" not in name:
            if not (ROOT / name).exists():
                missing.append(f"path {name}")
        elif name.startswith(f"{ENGINE}.") and not engine_name_exists(name):
            missing.append(f"module {name}")
    assert not missing, "docs/architecture.md names what is not in the tree: " + ", ".join(missing)


def test_architecture_doc_shows_the_engine_layers_of_the_contract():
    text = ARCHITECTURE.read_text(encoding="utf-8")
    blocks = re.findall(r"^```\n(.*?)^```", text, re.S | re.M)
    assert "\n".join(ENGINE_LAYERS) + "\n" in blocks, "docs/architecture.md shows other layers than ENGINE_LAYERS"
