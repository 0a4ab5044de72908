"""``pyagent new-plugin``: the scaffold installs with ``pip install -e``, is discovered, passes the kit."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
import sysconfig
import tomllib
import venv
from pathlib import Path

import pytest

from pyagent_core.scaffold import supported_kinds
from pyagent_core.testing import KIT_EXTRAS
from pyagent_core.version import compatible_requirement


@pytest.fixture
def child_env(tmp_path) -> Path:
    """A new virtual environment that also sees this environment's packages.

    The scaffold is installed there, so the test environment itself is left untouched.
    """
    env = tmp_path / "env"
    venv.create(env, with_pip=False)
    site_dir = next((env / "lib").glob("python*/site-packages"))
    parent = sysconfig.get_paths()["purelib"]
    (site_dir / "_parent_env.pth").write_text(f"import site; site.addsitedir({parent!r})\n")
    return env / "bin" / "python"


def run(*argv: str | Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(a) for a in argv], capture_output=True, text=True, cwd=cwd, timeout=300,
                          env={"PATH": "/usr/bin:/bin", "PYAGENT_USER_CONFIG": str(cwd / "u.toml")})


@pytest.mark.parametrize("kind", supported_kinds())
def test_scaffold_installs_is_listed_and_passes_the_kit(kind, tmp_path, child_env):
    created = run(sys.executable, "-m", "pyagent_core.cli", "new-plugin", "demo-x", "--kind", kind,
                  "--dir", tmp_path, cwd=tmp_path)
    assert created.returncode == 0, created.stderr
    dist = tmp_path / f"pyagent-{kind.replace('_', '-')}-demo-x"
    python = shlex.quote(sys.executable)  # the next steps run with this interpreter, whatever is first on PATH
    assert f"next: {python} -m pip install -e {shlex.quote(f'{dist}[test]')} && {python} -m pyagent_core.cli list " \
        f"{kind} && {python} -m pytest " in created.stdout, created.stdout
    project = tomllib.loads((dist / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert project["optional-dependencies"]["test"] == [compatible_requirement(f"pyagent-core[{KIT_EXTRAS[kind]}]")]
    assert project["dependencies"][0] == compatible_requirement()
    install = run(child_env, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
                  "-e", dist, cwd=tmp_path)
    assert install.returncode == 0, install.stderr
    listed = run(child_env, "-m", "pyagent_core.cli", "list", kind, "--check", "--json", cwd=tmp_path)
    records = {r["name"]: r for r in json.loads(listed.stdout)["kinds"][kind]}
    assert records["demo-x"]["available"] and records["demo-x"]["checked"]
    assert records["demo-x"]["dist"] == dist.name
    tests = run(child_env, "-m", "pytest", "-q", "-p", "no:cacheprovider", dist / "tests", cwd=dist)
    assert tests.returncode == 0, tests.stdout + tests.stderr
    assert " passed" in tests.stdout and "failed" not in tests.stdout


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
