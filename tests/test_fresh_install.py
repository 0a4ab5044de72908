"""Installed into fresh virtualenvs, distributions pull only what they declare.

pyagent-core alone with one plugin pulls no torch; pyagent-transformers with a sampler plugin pulls
the shared sampler host, not the engine. The distributions are installed from copies of their source
folders (so nothing is built inside the checkout), with the project's constraints file, exactly as a
plugin author or a transformers user would install them (torch from the local wheel).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PLUGIN = ROOT / "plugins" / "kvcache" / "pyagent-kvcache-policies"
HEAVY = {"torch", "numpy", "gguf", "tokenizers", "safetensors", "jinja2", "jsonschema", "cffi",
         "pyagent-kernels", "pyagent-engine"}

IMPORT_ALL_OF_CORE = """
import importlib, pkgutil, sys
import pyagent_core
names = [m.name for m in pkgutil.walk_packages(pyagent_core.__path__, "pyagent_core.")
         if not m.name.startswith(("pyagent_core.testing", "pyagent_core.scaffold.templates"))
         and not m.name.endswith(".__main__")]
for name in names:
    importlib.import_module(name)
print(len(names), "torch" in sys.modules)
"""


TRANSFORMERS_STACK = ("libs/pyagent-sampler-base", "libs/pyagent-sampler-host",
                      "plugins/samplers/pyagent-samplers-reference", "integrations/pyagent-transformers")
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


def copy_dist(folder: Path, into: Path) -> Path:
    """A copy of the distribution at ``folder`` (sources, no build outputs) under ``into``."""
    return shutil.copytree(folder, into / folder.name,
                           ignore=shutil.ignore_patterns("__pycache__", "*.egg-info", "build", "tests"))


def run(*args: str | Path, cwd: Path | None = None) -> str:
    result = subprocess.run([str(a) for a in args], capture_output=True, text=True, cwd=cwd, timeout=900)
    assert result.returncode == 0, f"{args} failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    return result.stdout


def test_core_alone_installs_without_torch_and_lists_one_plugin(tmp_path):
    core = tmp_path / "pyagent-core"
    core.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, core / name)
    shutil.copytree(ROOT / "pyagent_core", core / "pyagent_core", ignore=shutil.ignore_patterns("__pycache__"))
    plugin = shutil.copytree(PLUGIN, tmp_path / PLUGIN.name,
                             ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    venv = tmp_path / "venv"
    run(sys.executable, "-m", "venv", venv)
    python = venv / "bin" / "python"
    run(python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "-c", ROOT / "constraints.txt",
        core, plugin)

    installed = {p["name"].lower() for p in json.loads(run(python, "-m", "pip", "list", "--format", "json"))}
    assert {"pyagent-core", "pyagent-kvcache-policies"} <= installed
    assert not installed & HEAVY, f"pyagent-core pulled {sorted(installed & HEAVY)}"

    listed = json.loads(run(venv / "bin" / "pyagent", "list", "eviction", "--json", cwd=tmp_path))
    rows = listed["kinds"]["eviction"]
    assert {"lru", "arc"} <= {row["name"] for row in rows}
    assert {row["dist"] for row in rows} == {"pyagent-kvcache-policies"} and all(row["available"] for row in rows)

    count, torch_loaded = run(python, "-c", IMPORT_ALL_OF_CORE, cwd=tmp_path).split()
    assert int(count) > 20 and torch_loaded == "False"


def test_transformers_adapter_installs_and_runs_without_the_engine(tmp_path):
    """Issue 27: pyagent-transformers hosts its chain through pyagent-sampler-host, so a fresh venv with it
    and a sampler plugin holds no pyagent-engine (nor its server, loader or kernels), and the processor
    gives transformers' own scores."""
    core = tmp_path / "pyagent-core"
    core.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, core / name)
    shutil.copytree(ROOT / "pyagent_core", core / "pyagent_core", ignore=shutil.ignore_patterns("__pycache__"))
    dists = [copy_dist(ROOT / folder, tmp_path) for folder in TRANSFORMERS_STACK]
    venv = tmp_path / "venv"
    run(sys.executable, "-m", "venv", venv)
    python = venv / "bin" / "python"
    run(python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "-c", ROOT / "constraints.txt",
        core, *dists)

    installed = {p["name"].lower() for p in json.loads(run(python, "-m", "pip", "list", "--format", "json"))}
    assert {"pyagent-transformers", "pyagent-sampler-host", "transformers", "torch"} <= installed
    assert not installed & ENGINE_ONLY, f"pyagent-transformers pulled {sorted(installed & ENGINE_ONLY)}"
    absent, imported = run(python, "-c", TRANSFORMERS_CHAIN, cwd=tmp_path).split()
    assert absent == "True" and imported == "False"
