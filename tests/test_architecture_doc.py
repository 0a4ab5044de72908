"""docs/architecture.md's layout of the repository is checked against the tree.

Every path the layout names exists (``<dist>`` and ``<kind>`` stand for any folder), and every
module and package of ``pyagent_core`` is named, so a module added or removed shows here.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "architecture.md"


def layout() -> list[tuple[bool, str]]:
    """The layout block's entries: (indented under ``pyagent_core/``, path), one per name in the first column."""
    block = DOC.read_text(encoding="utf-8").split("## Layout of the repository", 1)[1].split("```")[1]
    entries = []
    for line in block.strip("\n").splitlines():
        names = re.split(r"\s{2,}", line.strip())[0]
        entries += [(line.startswith("  "), name) for name in names.split(", ")]
    return entries


def test_every_path_the_layout_names_exists():
    missing = []
    for in_core, name in layout():
        pattern = ("pyagent_core/" if in_core else "") + re.sub(r"<\w+>", "*", name).rstrip("/")
        if not list(ROOT.glob(pattern)):
            missing.append(pattern)
    assert not missing, f"docs/architecture.md's layout names what is not in the tree: {missing}"


def test_the_layout_names_every_module_of_the_core():
    named = {name.rstrip("/").removesuffix(".py") for in_core, name in layout() if in_core}
    on_disk = {p.stem if p.suffix == ".py" else p.name for p in (ROOT / "pyagent_core").iterdir()
               if (p.suffix == ".py" and p.name != "__init__.py") or (p / "__init__.py").exists()}
    assert on_disk == named, (f"pyagent_core modules missing from docs/architecture.md's layout: "
                              f"{sorted(on_disk - named)}; named there but gone: {sorted(named - on_disk)}")
