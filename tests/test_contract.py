"""The fenced contract: versions, ranges, the changelog, and what other distributions use from the core.

Every distribution of the repository is released with pyagent-core's version; a dependent states
the range of one contract version on each pyagent distribution it names
(``pyagent-core>=0.3,<0.4``); CHANGELOG.md's newest release is that version and names every
distribution; and nothing outside pyagent-core imports ``pyagent_core.cli`` (the core's own
commands, which may change in any release): command helpers are public in
``pyagent_core.commands``.
"""

from __future__ import annotations

import ast
import importlib.util
import re
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement

import pyagent_core
from pyagent_core.version import CONTRACT_VERSION, compatible_requirement

ROOT = Path(__file__).resolve().parents[1]
SPEC = importlib.util.spec_from_file_location("wheels", ROOT / "tools" / "wheels.py")
assert SPEC and SPEC.loader
WHEELS = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(WHEELS)  # tools/wheels.py knows where the distributions are
PROJECTS = {folder: tomllib.loads((folder / "pyproject.toml").read_text(encoding="utf-8"))["project"]
            for folder in WHEELS.distribution_folders()}
NAMES = {project["name"] for project in PROJECTS.values()}


def requirements(project: dict) -> list[tuple[str, Requirement]]:
    """Every requirement of ``project``: its dependencies and each extra's, with where it is stated."""
    found = [("dependencies", Requirement(r)) for r in project.get("dependencies", [])]
    for extra, items in project.get("optional-dependencies", {}).items():
        found += [(f"extra {extra!r}", Requirement(r)) for r in items]
    return found


def test_every_distribution_is_found():
    assert len(PROJECTS) >= 30 and {"pyagent-core", "pyagent-kernels", "pyagent-engine"} <= NAMES


def test_every_pyagent_requirement_states_one_contract_version():
    expected = Requirement(compatible_requirement()).specifier
    wrong = []
    for folder, project in PROJECTS.items():
        for where, req in requirements(project):
            if req.name in NAMES and req.name != project["name"] and req.specifier != expected:
                wrong.append(f"{folder.relative_to(ROOT).as_posix() or '.'}: {where} states {req} "
                             f"(write {compatible_requirement(req.name)})")
    assert not wrong, "pyagent requirements without the contract's range:\n" + "\n".join(wrong)


def test_contract_version_is_the_distribution_version():
    core = PROJECTS[ROOT]
    assert core["version"] == pyagent_core.__version__
    assert CONTRACT_VERSION == ".".join(core["version"].split(".")[:2]) == pyagent_core.CONTRACT_VERSION
    assert compatible_requirement() == f"pyagent-core>={CONTRACT_VERSION},<0.{int(CONTRACT_VERSION.split('.')[1]) + 1}"


def test_compatible_requirement_spans_one_minor_version_before_1_0_and_one_major_after():
    assert compatible_requirement("pyagent-x", "0.3") == "pyagent-x>=0.3,<0.4"
    assert compatible_requirement("pyagent-x", "1.2") == "pyagent-x>=1.2,<2"


def test_every_distribution_has_the_core_version_and_the_changelog_names_it():
    versions = {project["name"]: project["version"] for project in PROJECTS.values()}
    assert set(versions.values()) == {pyagent_core.__version__}, versions
    changelog = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    releases = re.findall(r"^## (\d+\.\d+\.\d+)\b", changelog, flags=re.M)
    assert releases and releases[0] == pyagent_core.__version__, f"CHANGELOG.md's newest release is {releases[:1]}"
    newest = changelog.split(f"## {releases[0]}", 1)[1].split("\n## ", 1)[0]
    missing = sorted(name for name in NAMES if f"`{name}`" not in newest)
    assert not missing, f"CHANGELOG.md's {releases[0]} section does not name {missing}"


def cli_imports(source: str) -> list[tuple[int, str]]:
    """Every import of ``pyagent_core.cli`` (or a module under it) in the module ``source``: line, statement."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
        else:
            continue
        if any(name == "pyagent_core.cli" or name.startswith("pyagent_core.cli.") for name in names):
            found.append((node.lineno, ast.unparse(node)))
    return found


@pytest.mark.parametrize("folder", [f for f in PROJECTS if f != ROOT], ids=lambda f: f.relative_to(ROOT).as_posix())
def test_no_distribution_imports_the_cores_cli(folder):
    found = [f"{path.relative_to(ROOT)}:{line}: {statement}" for path in sorted(folder.rglob("*.py"))
             for line, statement in cli_imports(path.read_text(encoding="utf-8"))]
    assert not found, "import pyagent_core.commands (public) instead of pyagent_core.cli:\n" + "\n".join(found)


def test_the_cli_check_finds_each_form_of_import():
    source = ("import pyagent_core.cli.output\nfrom pyagent_core.cli import full_app\n"
              "from pyagent_core import cli\nfrom pyagent_core import commands\nimport pyagent_core.client\n")
    assert [line for line, _ in cli_imports(source)] == [1, 2, 3]
