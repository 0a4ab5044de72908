"""Fixtures of the cross-package tests: throwaway installed distributions and registries over them."""

from __future__ import annotations

import sys
import textwrap
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

import pytest

from pyagent_core.config import Settings
from pyagent_core.discovery import iter_entry_points
from pyagent_core.registry import Registry


class SitePackages:
    """A temporary folder holding distributions installed the way pip lays them out.

    Each distribution gets a ``<name>-<version>.dist-info`` with ``METADATA`` and
    ``entry_points.txt``, so ``importlib.metadata`` finds it exactly as it finds a pip-installed one.
    """

    def __init__(self, root: Path) -> None:
        self.root = root

    def add(self, dist: str, modules: Mapping[str, str], entry_points: Mapping[str, str],
            version: str = "0.1.0", requires: tuple[str, ...] = ()) -> None:
        """Install ``dist`` with ``modules`` (dotted name -> source) and ``pyagent`` entry points."""
        for module, source in modules.items():
            path = self.root.joinpath(*module.split(".")).with_suffix(".py")
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(textwrap.dedent(source), encoding="utf-8")
        info = self.root / f"{dist.replace('-', '_')}-{version}.dist-info"
        info.mkdir()
        meta = ["Metadata-Version: 2.1", f"Name: {dist}", f"Version: {version}"]
        meta += [f"Requires-Dist: {r}" for r in requires]
        (info / "METADATA").write_text("\n".join(meta) + "\n", encoding="utf-8")
        eps = "[pyagent]\n" + "".join(f"{k} = {v}\n" for k, v in entry_points.items())
        (info / "entry_points.txt").write_text(eps, encoding="utf-8")

    def entry_points(self) -> list:
        """The entry points of this folder only (not of the test environment)."""
        sys.path.insert(0, str(self.root))
        try:
            return [e for e in iter_entry_points() if e.dist and self._owns(e.dist)]
        finally:
            sys.path.remove(str(self.root))

    def _owns(self, dist: str) -> bool:
        return any(p.name.startswith(dist.replace("-", "_") + "-") for p in self.root.glob("*.dist-info"))


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[SitePackages]:
    """An empty site folder on ``sys.path`` for this test."""
    root = tmp_path / "site"
    root.mkdir()
    monkeypatch.syspath_prepend(str(root))
    before = set(sys.modules)
    yield SitePackages(root)
    for name in set(sys.modules) - before:  # the next test must import its own copies
        if str(root) in str(getattr(sys.modules[name], "__file__", "") or ""):
            del sys.modules[name]


@pytest.fixture
def make_registry(site: SitePackages, tmp_path: Path) -> Callable[..., Registry]:
    """Build a registry over ``site``'s distributions only, with isolated config files."""

    def build(environ: Mapping[str, str] | None = None, cwd: Path | None = None) -> Registry:
        env = {"PYAGENT_USER_CONFIG": str(tmp_path / "user" / "config.toml"), **(environ or {})}
        settings = Settings.load(env, cwd or tmp_path)
        return Registry(environ=env, entry_points=site.entry_points(), settings=settings)

    return build
