"""The README and docs stay true: the backend matrix (docs/backends.md) is the one the installed specs generate."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"
MATRIX = README.parent / "docs" / "backends.md"


def test_backend_matrix_matches_registered_specs(cli, tmp_path):
    text = MATRIX.read_text(encoding="utf-8")
    match = re.search(r"<!-- matrix:start -->\n(.*?)<!-- matrix:end -->", text, re.S)
    assert match, "docs/backends.md lost its matrix markers"
    generated = cli("list", "--markdown", cwd=tmp_path).stdout
    assert match.group(1) == generated, (
        "docs/backends.md's backend matrix is stale: replace the lines between the matrix markers with the "
        "output of `.venv/bin/pyagent list --markdown`"
    )


def test_quick_start_commands_exist_in_makefile():
    makefile = (README.parent / "Makefile").read_text(encoding="utf-8")
    for target in ("install:", "demo:", "test:", "bench:"):
        assert f"\n{target}" in makefile
    assert "make test" in (README.parent / ".ci" / "run").read_text(encoding="utf-8")


DOCS = [README, *sorted((README.parent / "docs").glob("*.md"))]


def _use_commands() -> list[str]:
    """Every ``pyagent use ...`` line of the README and docs/ that names a real backend (no ``NAME``)."""
    lines = (line.split("#")[0].strip() for doc in DOCS for line in doc.read_text(encoding="utf-8").splitlines())
    return sorted({line for line in lines if line.startswith("pyagent use ") and "NAME" not in line})


def _toml_examples() -> list[str]:
    """The ``pyagent.toml`` examples: TOML blocks of docs/ and the config module's docstring."""
    import pyagent_core.config

    blocks = [b for doc in DOCS for b in re.findall(r"```toml\n(.*?)```", doc.read_text(encoding="utf-8"), re.S)]
    docstring = pyagent_core.config.__doc__ or ""
    blocks.append(textwrap.dedent(docstring.partition("::\n")[2].partition("\nThe project")[0]))
    return [b for b in blocks if re.search(r"^\[(attention|sampler|grammar)", b, re.M)]


@pytest.mark.parametrize("command", _use_commands())
def test_documented_use_commands_work(cli, tmp_path, command):
    assert _use_commands(), "the docs lost their `pyagent use` examples"
    result = cli(*command.split()[1:], cwd=tmp_path, env={"PYAGENT_USER_CONFIG": str(tmp_path / "user.toml")})
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize("example", _toml_examples())
def test_documented_config_files_are_valid(cli, tmp_path, example):
    (tmp_path / "pyagent.toml").write_text(example)
    result = cli("config", "--json", cwd=tmp_path, env={"PYAGENT_USER_CONFIG": str(tmp_path / "user.toml")})
    assert result.returncode == 0 and "error" not in result.stdout.lower(), result.stdout + result.stderr
