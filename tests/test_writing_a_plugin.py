"""docs/writing-a-plugin.md shows the scaffold's sampler distribution, byte for byte, and the scaffold's kit extras.

The tutorial marks each file of the distribution it builds with a first line ``# file: PATH``. Those
files are the ones ``pyagent new-plugin softcap --kind sampler`` writes, so the tutorial and the
scaffold cannot drift apart; tests/test_scaffold.py installs that scaffold into a fresh environment,
lists it with ``--check`` and runs its tests.
"""

from __future__ import annotations

import re
from pathlib import Path

import typer
from typer.testing import CliRunner

from pyagent_core import hookimpl
from pyagent_core.registry import Registry
from pyagent_core.scaffold import scaffold_plugin, supported_kinds
from pyagent_core.testing import KIT_EXTRAS
from pyagent_core.testing.scaffolded import import_template
from pyagent_engine.cli.sampler_flags import SamplerSettings, with_sampler_flags

TUTORIAL = Path(__file__).resolve().parents[1] / "docs" / "writing-a-plugin.md"
FILE_BLOCK = re.compile(r"^```[a-z]*\n# file: (?P<path>\S+)\n(?P<body>.*?)^```\n", re.S | re.M)
DIST = "pyagent-sampler-softcap"


def tutorial_files() -> dict[str, str]:
    """The tutorial's ``# file:`` blocks: relative path -> contents (without the marker line)."""
    text = TUTORIAL.read_text(encoding="utf-8")
    files = {m["path"]: m["body"] for m in FILE_BLOCK.finditer(text)}
    assert files, f"{TUTORIAL.name} has no code block starting with a '# file: PATH' line"
    return files


def test_tutorial_names_each_file_once_and_shows_the_commands():
    text = TUTORIAL.read_text(encoding="utf-8")
    paths = [m["path"] for m in FILE_BLOCK.finditer(text)]
    assert len(paths) == len(set(paths)), f"a file is given twice: {paths}"
    for command in (f"python -m pip install --find-links dist -e './{DIST}[test]'", "pyagent list sampler",
                    f"python -m pytest {DIST}/tests", "make wheels"):
        assert command in text, f"the tutorial no longer shows `{command}`"


def test_tutorial_files_are_the_sampler_scaffold(tmp_path):
    written = scaffold_plugin("softcap", "sampler", tmp_path)
    scaffold = {p.relative_to(written).as_posix(): p.read_text(encoding="utf-8")
                for p in written.rglob("*") if p.is_file()}
    shown = tutorial_files()
    assert set(shown) == {path for path, text in scaffold.items() if text and path != "README.md"}, (
        "the tutorial shows other files than `pyagent new-plugin softcap --kind sampler` writes (README.md and "
        "the empty py.typed aside)"
    )
    for path, text in shown.items():
        assert text == scaffold[path], f"the tutorial's {path} differs from the scaffold's: update one from the other"


def test_tutorial_sampler_goes_after_temperature_in_the_default_chain():
    spec = import_template("sampler", "softcap").plugin.SPEC
    assert (spec.stage, spec.position) == ("temperature", 30)


def test_tutorial_table_gives_each_kind_its_kit_extra():
    rows = re.findall(r"^\| `(\w+)` \| .* \| `pyagent-core\[([\w-]+)\]` \|$", TUTORIAL.read_text(encoding="utf-8"),
                      flags=re.M)
    assert dict(rows) == KIT_EXTRAS and set(KIT_EXTRAS) == set(supported_kinds())


def test_tutorial_sampler_parameter_is_a_flag_with_its_help():
    """Its option, declared with request=True, is a `pyagent generate` flag with the spec's help."""
    spec = import_template("sampler", "softcap").plugin.SPEC

    class Plugin:
        @hookimpl
        def pyagent_register_samplers(self, register):
            register(spec)

    def command(prompt: str, sampler: SamplerSettings | None = None) -> None:
        seen.append(sampler)

    seen: list[SamplerSettings | None] = []
    app = typer.Typer()
    app.command()(with_sampler_flags(command, Registry(plugins=[("softcap", Plugin())]).load_plugins()))
    helps = {opt: param.help for param in typer.main.get_command(app).params for opt in getattr(param, "opts", [])}
    assert helps["--softcap"] == "Soft-cap the logits at this value, >= 0 (0: off)."
    assert CliRunner().invoke(app, ["hi", "--softcap", "30"]).exit_code == 0
    assert seen[0] is not None and seen[0].params == {"softcap": 30.0}
