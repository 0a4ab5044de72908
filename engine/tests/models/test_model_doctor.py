"""``pyagent doctor --model PATH`` (the engine's ``pyagent_check_model``): whether a model can run, and why not."""

from __future__ import annotations

import json
from pathlib import Path

from pyagent_core.records import DoctorCheck
from pyagent_engine.models.diagnosis import diagnose_model
from pyagent_engine.testing.cli_batch import run_commands

from .test_model_loading import write_tiny_gguf


def rows(path: Path | str) -> dict[str, DoctorCheck]:
    return {row.name: row for row in diagnose_model(str(path))}


def test_the_embedded_gguf_can_run(gguf_path: Path) -> None:
    found = rows(gguf_path)
    assert all(row.ok for row in found.values()), found
    assert found["model architecture"].detail.startswith("llama (pyagent_model_llama.model:Llama): 30 layers")
    assert "Q4_1 x" in found["model block types"].detail
    assert found["model tokenizer"].detail.startswith("gpt2 (pre smollm), 49152 tokens")


def test_an_unserved_architecture_is_named_with_the_installed_ones(tmp_path: Path) -> None:
    write_tiny_gguf(tmp_path / "m.gguf", "mamba")
    row = rows(tmp_path / "m.gguf")["model architecture"]
    assert not row.ok and "'mamba'" in row.detail and "llama (LlamaForCausalLM; GGUF llama)" in row.detail


def test_a_folder_without_tokenizer_and_a_missing_path(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"]}))
    found = rows(tmp_path)
    assert not found["model"].ok and "lacks tokenizer.json, *.safetensors" in found["model"].detail
    assert not found["model architecture"].ok and "lacks the required key 'vocab_size'" in \
        found["model architecture"].detail
    assert not rows(tmp_path / "nothing")["model"].ok


def test_the_command_exits_1_when_the_model_cannot_run(gguf_path: Path, tmp_path: Path) -> None:
    write_tiny_gguf(tmp_path / "m.gguf", "mamba")
    bad, good = run_commands([("doctor", "--model", str(tmp_path / "m.gguf"), "--json"),
                              ("doctor", "--model", str(gguf_path))])
    assert bad.returncode == 1
    assert any(c["name"] == "model architecture" and not c["ok"] for c in json.loads(bad.stdout)["checks"])
    assert good.returncode == 0, good.stderr
    assert "model block types" in good.stdout
