"""docs/writing-a-plugin.md runs: its files, installed, are listed by ``pyagent list`` and pass their own tests.

The tutorial marks each file of the distribution it builds with a first line ``# file: PATH``. This
test writes those blocks into a fresh folder, installs the distribution with pip into a temporary
target folder (no dependencies: the test environment has them), then, in fresh processes with that
folder on ``PYTHONPATH``, lists the sampler and runs the tutorial's tests with pytest.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

TUTORIAL = Path(__file__).resolve().parents[1] / "docs" / "writing-a-plugin.md"
FILE_BLOCK = re.compile(r"^```[a-z]*\n# file: (?P<path>\S+)\n(?P<body>.*?)^```\n", re.S | re.M)
DIST = "pyagent-sampler-softcap"


def tutorial_files() -> dict[str, str]:
    """The tutorial's ``# file:`` blocks: relative path -> contents (the marker line included)."""
    text = TUTORIAL.read_text(encoding="utf-8")
    files = {m["path"]: f"# file: {m['path']}\n{m['body']}" for m in FILE_BLOCK.finditer(text)}
    assert files, f"{TUTORIAL.name} has no code block starting with a '# file: PATH' line"
    return files


def test_tutorial_names_each_file_once_and_shows_the_commands():
    text = TUTORIAL.read_text(encoding="utf-8")
    paths = [m["path"] for m in FILE_BLOCK.finditer(text)]
    assert len(paths) == len(set(paths)), f"a file is given twice: {paths}"
    assert {"pyproject.toml", "src/pyagent_sampler_softcap/plugin.py", "src/pyagent_sampler_softcap/impl.py",
            "tests/test_softcap.py"} <= set(paths)
    for command in (f"pip install -e ./{DIST}", "pyagent list sampler", f"pytest {DIST}/tests"):
        assert command in text, f"the tutorial no longer shows `{command}`"


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> tuple[Path, Path, dict[str, str]]:
    """The tutorial's distribution written out and pip-installed into a target folder.

    Returns the distribution folder, the target folder and the environment that puts the target on
    ``sys.path`` with an isolated user config.
    """
    root = tmp_path_factory.mktemp("tutorial")
    dist = root / DIST
    for relative, text in tutorial_files().items():
        path = dist / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    target = root / "site"
    install = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-deps",
         "--no-build-isolation", "--target", str(target), str(dist)],
        capture_output=True, text=True, cwd=root, timeout=300,
    )
    assert install.returncode == 0, f"pip could not install the tutorial's distribution:\n{install.stderr}"
    env = {"PYAGENT_USER_CONFIG": str(root / "user.toml"),
           "PYTHONPATH": os.pathsep.join(filter(None, [str(target), os.environ.get("PYTHONPATH")]))}
    return dist, target, env


def test_pyagent_list_shows_the_tutorial_sampler(installed, cli, tmp_path):
    _, _, env = installed
    listed = cli("list", "sampler", "--check", "--json", env=env, cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    rows = {row["name"]: row for row in json.loads(listed.stdout)["kinds"]["sampler"]}
    assert "softcap" in rows, f"pyagent list sampler does not show softcap: {sorted(rows)}"
    assert rows["softcap"]["dist"] == DIST
    assert rows["softcap"]["available"] and rows["softcap"]["checked"], rows["softcap"]
    shown = cli("list", "sampler", env=env, cwd=tmp_path)  # the command the tutorial shows
    assert shown.returncode == 0 and "softcap" in shown.stdout, shown.stdout + shown.stderr


def test_tutorial_sampler_declares_its_place_in_the_default_chain(installed, cli, tmp_path):
    _, _, env = installed
    info = cli("info", "sampler", "softcap", "--json", env=env, cwd=tmp_path)
    assert info.returncode == 0, info.stderr
    capabilities = json.loads(info.stdout)["capabilities"]
    assert capabilities["stage"] == "temperature" and capabilities["position"] == 30, capabilities


def test_tutorial_tests_pass(installed, tmp_path):
    dist, _, env = installed
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(dist / "tests")],
        capture_output=True, text=True, cwd=dist, timeout=600, env={**os.environ, **env},
    )
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    summary = result.stdout.strip().splitlines()[-1]
    passed = int(re.search(r"(\d+) passed", summary).group(1))  # type: ignore[union-attr]
    assert passed >= 10 and "failed" not in summary, summary


def test_tutorial_sampler_parameter_is_a_generate_flag(installed, cli, tmp_path):
    """Its option, declared with request=True, is a `pyagent generate` flag with the spec's help."""
    _, _, env = installed
    shown = cli("generate", "--help", env={**env, "COLUMNS": "200"}, cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    assert "--softcap" in shown.stdout and "Soft-cap the logits at this value" in shown.stdout
