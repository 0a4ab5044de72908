"""The plugin module: its entry point, the spec it registers, lazy listing and selection."""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys
from pathlib import Path

import pluggy

from pyagent_attention_torch_sdpa import plugin
from pyagent_attention_torch_sdpa.backend import TorchSdpaAttention
from pyagent_core import hookspecs
from pyagent_core.config import Settings
from pyagent_core.registry import Registry
from pyagent_core.types import AttentionSpec


def test_entry_point_names_the_plugin_module() -> None:
    declared = {(point.name, point.value) for point in importlib.metadata.entry_points(group="pyagent")}
    assert ("attention-torch-sdpa", "pyagent_attention_torch_sdpa.plugin") in declared


def test_registers_the_spec_through_the_hook() -> None:
    manager = pluggy.PluginManager(hookspecs.PROJECT)
    manager.add_hookspecs(hookspecs)
    manager.register(plugin)
    specs: list[AttentionSpec] = []
    manager.hook.pyagent_register_attention_backends(register=specs.append)
    assert specs == [plugin.SPEC]
    spec = specs[0]
    assert (spec.name, spec.priority, spec.dtypes) == ("torch-sdpa", 10, ("float32", "bfloat16"))
    assert (spec.head_sizes, spec.block_sizes) == ((), ())
    assert spec.prefill and spec.decode and spec.tree_mask and spec.sliding_window and spec.logits_soft_cap
    assert spec.summary and spec.install_hint and spec.requires == ("torch",)


def test_listing_imports_neither_torch_nor_the_backend() -> None:
    code = (
        "import importlib, sys; "
        "p = importlib.import_module('pyagent_attention_torch_sdpa.plugin'); specs = []; "
        "p.pyagent_register_attention_backends(register=specs.append); "
        "print(sorted(m for m in sys.modules if m == 'torch' or m.startswith('pyagent_attention_torch_sdpa.')))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "['pyagent_attention_torch_sdpa.plugin']"


def test_selected_by_priority_with_options_validated(tmp_path: Path) -> None:
    settings = Settings.load({"PYAGENT_USER_CONFIG": str(tmp_path / "user.toml")}, cwd=tmp_path)
    registry = Registry(environ={}, entry_points=[], plugins=[("attention-torch-sdpa", plugin)], settings=settings)
    chosen = registry.select("attention")
    assert chosen.backend.name == "torch-sdpa" and dict(chosen.options) == {"batch_invariant": True}
    assert registry.check(chosen.backend).available
    assert registry.load(chosen.backend) is TorchSdpaAttention
    unpadded = registry.select("attention", "torch-sdpa", {"batch_invariant": "false"})
    assert dict(unpadded.options) == {"batch_invariant": False}
