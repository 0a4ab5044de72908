"""Meta-tests: every hookspec is documented with its exact signature, and some test calls it."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest

from pyagent_core import hookspecs

ROOT = Path(__file__).resolve().parents[1]
HOOKS = sorted(name for name in vars(hookspecs) if name.startswith("pyagent_"))
DOCS = (ROOT / "docs" / "hooks.md").read_text(encoding="utf-8")
TESTS = {p: p.read_text(encoding="utf-8") for folder in ("tests", "engine/tests")
         for p in (ROOT / folder).rglob("test_*.py") if p.name != Path(__file__).name}


def signature(name: str) -> str:
    """``name(arg: Annotation, ...) -> Return`` as written in docs/hooks.md."""
    sig = inspect.signature(getattr(hookspecs, name))
    params = ", ".join(f"{p.name}: {p.annotation}" for p in sig.parameters.values())
    return f"{name}({params}) -> {sig.return_annotation}"


def test_there_is_a_hook_per_kind_plus_lifecycle_and_cli():
    assert len(HOOKS) == 18


@pytest.mark.parametrize("hook", HOOKS)
def test_hook_is_documented_with_its_signature(hook):
    assert f"### `{hook}`" in DOCS, f"docs/hooks.md has no section for {hook}"
    assert signature(hook) in DOCS, f"docs/hooks.md shows a different signature for {hook}"


@pytest.mark.parametrize("hook", HOOKS)
def test_hookspec_docstring_states_arguments_return_and_firstresult(hook):
    doc = inspect.getdoc(getattr(hookspecs, hook)) or ""
    assert "Args:" in doc and "Returns:" in doc and "firstresult" in doc


@pytest.mark.parametrize("hook", HOOKS)
def test_hook_has_a_test(hook):
    assert any(hook in text for text in TESTS.values()), f"no test under tests/ or engine/tests/ mentions {hook}"


def test_docs_mention_no_removed_hooks():
    documented = {line[5:-1] for line in DOCS.splitlines() if line.startswith("### `pyagent_")}
    assert documented == set(HOOKS)
