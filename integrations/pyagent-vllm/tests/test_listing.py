"""`pyagent vllm list` works without vLLM and without importing torch or vLLM."""

from __future__ import annotations

import json
import subprocess
import sys

from typer.testing import CliRunner

from pyagent_core.commands import command_line


def test_list_json_names_what_the_adapter_registers() -> None:
    result = CliRunner().invoke(command_line(), ["vllm", "list", "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    hosted = report["logits_processors"]
    assert "dry" in hosted["pyagent_vllm.samplers:PyagentLogitsProcessors"]
    assert "mirostat" in hosted["pyagent_vllm.samplers:PyagentArgmaxInvariantProcessors"]
    assert report["proposers"]["ngram"] == "pyagent_vllm.proposers.NgramProposer"


def test_listing_imports_neither_torch_nor_vllm() -> None:
    code = ("import sys; from pyagent_core.registry import get_registry; from pyagent_vllm.inventory import inventory; "
            "inventory(get_registry()); import pyagent_vllm.plugin; "
            "print(sorted(m for m in ('torch', 'vllm') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == "[]"


def test_doctor_points_at_the_vllm_environment_not_the_main_one() -> None:
    """The README warns against `pip install vllm` into the main environment; doctor must not advise it."""
    from pyagent_vllm.plugin import pyagent_doctor_checks, vllm_version

    [check] = pyagent_doctor_checks()
    if vllm_version() is not None:
        assert "pyagent vllm list" in check.detail
        return
    assert "make vllm-env" in check.detail and "pip install vllm" not in check.detail + check.hint
