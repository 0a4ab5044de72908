"""``pyagent new-plugin``: the scaffold installs with ``pip install -e``, is discovered, passes the kit."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
import sysconfig
import tomllib
import venv
from collections import Counter
from pathlib import Path
from xml.etree import ElementTree

import attrs
import pytest

from pyagent_core.scaffold import supported_kinds
from pyagent_core.testing import KIT_EXTRAS
from pyagent_core.version import compatible_requirement


def run(*argv: str | Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(a) for a in argv], capture_output=True, text=True, cwd=cwd, timeout=600,
                          env={"PATH": "/usr/bin:/bin", "PYAGENT_USER_CONFIG": str(cwd / "u.toml")})


@attrs.frozen
class Scaffolded:
    """Every kind's scaffold, made by the CLI, installed together into one child environment."""

    root: Path
    created: dict[str, subprocess.CompletedProcess[str]]
    installed: subprocess.CompletedProcess[str]
    listed: subprocess.CompletedProcess[str]
    tests: subprocess.CompletedProcess[str]
    report: Path


@pytest.fixture(scope="module")
def scaffolded(tmp_path_factory) -> Scaffolded:
    """One scaffold per kind, ``pip install -e`` of all of them in one call into a new virtual environment
    that also sees this environment's packages (this one stays untouched), one ``pyagent list --check``,
    and one pytest run of every scaffold's tests (a JUnit report says which passed). One install and
    one kit run instead of one per kind: each costs seconds of interpreter and pip start-up."""
    root = tmp_path_factory.mktemp("scaffolds")
    env = root / "env"
    venv.create(env, with_pip=False)
    site_dir = next((env / "lib").glob("python*/site-packages"))
    parent = sysconfig.get_paths()["purelib"]
    (site_dir / "_parent_env.pth").write_text(f"import site; site.addsitedir({parent!r})\n")
    python = env / "bin" / "python"
    created = {kind: run(sys.executable, "-m", "pyagent_core.cli", "new-plugin", "demo-x", "--kind", kind,
                         "--dir", root, cwd=root) for kind in supported_kinds()}
    dists = [dist_of(root, kind) for kind in supported_kinds()]
    installed = run(python, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
                    *(arg for dist in dists for arg in ("-e", dist)), cwd=root)
    listed = run(python, "-m", "pyagent_core.cli", "list", "--check", "--json", cwd=root)
    report = root / "kits.xml"
    tests = run(python, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--import-mode=importlib",
                f"--junitxml={report}", *(dist / "tests" for dist in dists), cwd=root)
    return Scaffolded(root, created, installed, listed, tests, report)


def dist_of(root: Path, kind: str) -> Path:
    return root / f"pyagent-{kind.replace('_', '-')}-demo-x"


def kit_outcomes(report: Path, dist: Path) -> Counter[str]:
    """How the tests of ``dist`` ended in the JUnit ``report``: passed, failure, error, skipped."""
    module = dist.name.replace("-", "_")
    outcomes: Counter[str] = Counter()
    for case in ElementTree.parse(report).iter("testcase"):
        if module not in (case.get("classname") or ""):
            continue
        ended = [child.tag for child in case if child.tag in ("failure", "error", "skipped")]
        outcomes[ended[0] if ended else "passed"] += 1
    return outcomes


@pytest.mark.parametrize("kind", supported_kinds())
def test_scaffold_installs_is_listed_and_passes_the_kit(kind, scaffolded):
    created, root = scaffolded.created[kind], scaffolded.root
    assert created.returncode == 0, created.stderr
    dist = dist_of(root, kind)
    python = shlex.quote(sys.executable)  # the next steps run with this interpreter, whatever is first on PATH
    assert f"next: {python} -m pip install -e {shlex.quote(f'{dist}[test]')} && {python} -m pyagent_core.cli list " \
        f"{kind} && {python} -m pytest " in created.stdout, created.stdout
    project = tomllib.loads((dist / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert project["optional-dependencies"]["test"] == [compatible_requirement(f"pyagent-core[{KIT_EXTRAS[kind]}]")]
    assert project["dependencies"][0] == compatible_requirement()
    assert scaffolded.installed.returncode == 0, scaffolded.installed.stderr
    records = {r["name"]: r for r in json.loads(scaffolded.listed.stdout)["kinds"][kind]}
    assert records["demo-x"]["available"] and records["demo-x"]["checked"]
    assert records["demo-x"]["dist"] == dist.name
    outcomes = kit_outcomes(scaffolded.report, dist)
    assert outcomes["passed"] > 0 and not outcomes["failure"] and not outcomes["error"], \
        (dict(outcomes), scaffolded.tests.stdout[-4000:])


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("new-plugin", "Bad Name", "--kind", "sampler"), "plugin name 'Bad Name' is invalid"),
        (("new-plugin", "x", "--kind", "nonsense"), "unknown component kind 'nonsense'"),
        (("new-plugin", "tool-call", "--kind", "tool_parser"), "class name 'ToolCall', which the tool_parser"),
        (("new-plugin", "2x", "--kind", "eviction"), "class name '2x', not a Python name"),
    ],
)
def test_scaffold_rejects_bad_input(cli, tmp_path, args, message):
    result = cli(*args, "--dir", str(tmp_path))
    assert result.returncode == 2 and message in result.stderr


def test_scaffold_refuses_to_overwrite(cli, tmp_path):
    assert cli("new-plugin", "twice", "--kind", "sampler", "--dir", str(tmp_path)).returncode == 0
    again = cli("new-plugin", "twice", "--kind", "sampler", "--dir", str(tmp_path))
    assert again.returncode == 2 and "already exists" in again.stderr
