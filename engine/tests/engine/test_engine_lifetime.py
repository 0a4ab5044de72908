"""An engine's memory goes with its last reference, without waiting for the garbage collector."""

from __future__ import annotations

import gc
import weakref

import pytest

from pyagent_engine import LLM, SamplingParams
from pyagent_engine.core.config import EngineConfig
from pyagent_engine.core.engine import Engine


@pytest.fixture
def collector_off():
    """The cyclic garbage collector paused, so only reference counting frees objects."""
    gc.collect()
    gc.disable()
    yield
    gc.enable()


def test_an_engine_that_ran_is_freed_with_its_last_reference(llm_bf16: LLM, collector_off) -> None:
    engine = Engine(llm_bf16.loaded, config=EngineConfig(kv_cache_gib=0.01))
    engine.add_request(llm_bf16.encode("Hi")[0], SamplingParams(max_tokens=3, ignore_eos=True))
    while engine.has_unfinished():
        engine.step()
    cache = weakref.ref(engine.kv.caches[0])
    alive = weakref.ref(engine)
    del engine
    assert alive() is None and cache() is None, "a reference cycle keeps the engine and its KV cache allocated"
