"""Listing commands import neither torch nor any backend implementation."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

PROBE = """
import json, sys
from pyagent_core.cli import main
sys.argv = ["pyagent", *json.loads(sys.argv[1])]
try:
    main()
except SystemExit:
    pass
from pyagent_core.registry import get_registry
registry = get_registry()
impls = {b.spec.impl.partition(":")[0] for k in ("attention", "mixer", "sampler", "grammar", "proposer",
         "eviction", "scheduler", "model", "tool_parser", "reasoning_parser") for b in registry.backends(k)}
sys.stderr.write("\\nPROBE" + json.dumps({
    "torch": "torch" in sys.modules,
    "impl_count": len(impls),
    "imported_impls": sorted(m for m in impls if m in sys.modules),
}))
"""


@pytest.mark.parametrize(
    "args",
    [["list"], ["list", "--json"], ["plugins", "--json"], ["info", "sampler", "top_k"], ["config"], ["doctor"]],
)
def test_command_imports_no_torch_and_no_implementation(args, tmp_path):
    result = subprocess.run([sys.executable, "-c", PROBE, json.dumps(args)], capture_output=True, text=True,
                            cwd=tmp_path, timeout=120,
                            env={"PYAGENT_USER_CONFIG": str(tmp_path / "u.toml"), "PATH": "/usr/bin:/bin"})
    report = json.loads(result.stderr.rpartition("PROBE")[2])
    assert report["impl_count"] > 0
    assert report["imported_impls"] == []
    assert report["torch"] is False
