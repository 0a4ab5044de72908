"""The documentation stays navigable and complete: links resolve, and docs/cli.md names every command and flag.

Links are checked the way GitHub renders them: a relative link must point to a file or folder of the
repository, and a ``#fragment`` to a heading of the target page (GitHub's slug: lowercase, spaces to
``-``, punctuation other than ``-`` and ``_`` dropped). The CLI reference is checked against the
command tree itself, with the engine's commands added through ``pyagent_register_commands``.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import typer

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.S | re.M)
README_LIMIT = 15_500  # bytes: the README is a newcomer's page; details go to docs/


def prose(page: Path) -> str:
    """The page without its fenced code blocks (links inside code are not links)."""
    return FENCE.sub("", page.read_text(encoding="utf-8"))


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: ``Speed: `pyagent bench engine` `` -> ``speed-pyagent-bench-engine``.

    Lowercase, backticks and punctuation other than ``-`` and ``_`` dropped, spaces to ``-``.
    """
    text = heading.strip().lower().replace("`", "")
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    """The anchors of every heading of ``page``."""
    headings = re.findall(r"^#{1,6} (.+)$", prose(page), re.M)
    return {slug(h) for h in headings}


def relative_links() -> list[tuple[Path, str]]:
    """Every (page, link) whose link is relative to the page (no scheme, not a mail address)."""
    found = []
    for page in PAGES:
        for target in LINK.findall(prose(page)):
            if not re.match(r"^[a-z][a-z0-9+.-]*:", target):
                found.append((page, target))
    return found


@pytest.mark.parametrize(("page", "link"), relative_links(), ids=lambda v: v.name if isinstance(v, Path) else v)
def test_relative_link_resolves(page, link):
    path, _, fragment = link.partition("#")
    target = (page.parent / path).resolve() if path else page
    assert target.exists(), f"{page.relative_to(ROOT)} links to {link!r}, but {target} does not exist"
    if fragment and target.suffix == ".md":
        assert fragment in anchors(target), (
            f"{page.relative_to(ROOT)} links to {link!r}, but {target.name} has no heading with anchor "
            f"#{fragment}; its anchors: {sorted(anchors(target))}"
        )


def test_every_docs_page_is_linked_from_the_readme_or_another_page():
    linked = {(page.parent / link.partition("#")[0]).resolve() for page, link in relative_links()}
    orphans = [p.name for p in PAGES[1:] if p.resolve() not in linked]
    assert not orphans, f"no page links to {orphans}"


def test_readme_is_a_short_page():
    size = len((ROOT / "README.md").read_bytes())
    assert size <= README_LIMIT, f"README.md is {size} bytes; move details to docs/ (limit {README_LIMIT})"


def command_tree() -> dict[str, list[str]]:
    """``"pyagent bench engine"`` -> its flags and arguments, for every command of the installed CLI."""
    from pyagent_core.cli import full_app

    found: dict[str, list[str]] = {}

    def walk(command, path: str) -> None:
        found[path] = [opt for param in command.params for opt in getattr(param, "opts", [])
                       + getattr(param, "secondary_opts", []) if opt.startswith("--")]
        for name, sub in getattr(command, "commands", {}).items():
            walk(sub, f"{path} {name}")

    walk(typer.main.get_command(full_app()), "pyagent")
    del found["pyagent"]
    return found


def test_cli_reference_has_a_section_per_command_naming_each_of_its_flags():
    text = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    sections = {m[1]: m.end() for m in re.finditer(r"^#{2,5} `(pyagent[^`]*)`$", text, re.M)}
    tree = command_tree()
    missing = sorted(set(tree) - set(sections))
    assert not missing, f"docs/cli.md has no '### `COMMAND`' section for {missing}"
    for command, flags in tree.items():
        start = sections[command]
        following = [end for end in sections.values() if end > start]
        section = text[start:min(following, default=len(text))]
        if command in ("pyagent generate", "pyagent chat", "pyagent serve"):  # they share the sampler flags' table
            section += text[text.index("### Sampler flags of generate and chat"):]
        undocumented = [flag for flag in flags if f"`{flag}" not in section]
        assert not undocumented, f"docs/cli.md does not document {undocumented} under `{command}`"
