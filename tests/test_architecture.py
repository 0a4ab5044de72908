"""Who may import whom, checked by import-linter with contracts derived from the repository's pyprojects.

The rules (docs/architecture.md): pyagent-core imports no other pyagent distribution, and torch
only in its conformance kit and inside the interfaces' helpers that are handed tensors;
pyagent-kernels imports nothing from pyagent; the engine reaches plugins through the registry, never
by import; a plugin or library imports only the pyagent distributions its pyproject declares, and
never a plugin. The contracts are written from the
pyprojects on disk, so a new plugin is covered the day it is added and a dependency that is not
declared is an import error here.
"""

from __future__ import annotations

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
    """Import package -> the pyagent packages it declares as dependencies, for pyprojects matching ``pattern``."""
    found = {}
    for path in sorted(ROOT.glob(pattern)):
        project = tomllib.loads(path.read_text(encoding="utf-8"))["project"]
        declared = {package_of(Requirement(r).name) for r in project.get("dependencies", [])}
        found[package_of(project["name"])] = {d for d in declared if d.startswith("pyagent_")}
    return found


PLUGINS = distributions("plugins/*/*/pyproject.toml")
LIBS = distributions("libs/*/pyproject.toml")
INTEGRATIONS = distributions("integrations/*/pyproject.toml")
CORE, KERNELS, ENGINE = "pyagent_core", "pyagent_kernels", "pyagent_engine"
EVERYTHING = {CORE, KERNELS, ENGINE, *PLUGINS, *LIBS, *INTEGRATIONS}


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
                  "    pyagent_core.interfaces.attention -> torch\n    pyagent_core.interfaces.grammar -> torch"),
        forbidden("kernels-import-nothing-from-pyagent", KERNELS, EVERYTHING - {KERNELS}),
        forbidden("engine-reaches-plugins-through-the-registry", ENGINE, set(PLUGINS) | set(LIBS) | set(INTEGRATIONS)),
    ]
    for package, declared in {**PLUGINS, **LIBS, **INTEGRATIONS}.items():
        allowed = {package, CORE, KERNELS} | declared
        banned = EVERYTHING - allowed
        banned |= set(PLUGINS) - {package}  # never another plugin, declared or not
        sections.append(forbidden(f"{package}-imports-only-what-it-declares", package, banned))
    header = ("[importlinter]\nroot_packages =\n    " + "\n    ".join(sorted(EVERYTHING))
              + "\ninclude_external_packages = True\nexclude_type_checking_imports = True\n")
    return header + "\n" + "\n".join(sections)


def test_every_distribution_of_the_repository_is_covered():
    assert len(PLUGINS) >= 17 and INTEGRATIONS
    on_disk = {p.name for p in ROOT.glob("plugins/*/*/src/*") if p.is_dir() and not p.name.endswith(".egg-info")}
    assert on_disk == set(PLUGINS), "every plugin's package is named after its distribution"


def test_import_contracts_hold(tmp_path):
    config = tmp_path / "importlinter.ini"
    config.write_text(contracts(), encoding="utf-8")
    lint = Path(sys.executable).with_name("lint-imports")
    if not lint.exists():
        pytest.skip("import-linter is not installed (it is in requirements-dev.txt)")
    result = subprocess.run([str(lint), "--no-cache", "--no-logo", str(config)], capture_output=True, text=True,
                            cwd=ROOT, timeout=600)
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-2000:]
