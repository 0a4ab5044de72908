"""The compile cache keeps memory bounded over many distinct schemas: by its own byte count, and in RSS.

Each xgrammar grammar of a JSON schema over the embedded model's 49k vocabulary holds about 2.9 MB
(its token-mask cache). 100 distinct schemas through a 16 MiB cache: the cache's count never passes
16 MiB, and the process grows by far less than the 128 MiB bound (a cache of 128 entries, as before,
or an unbounded one would hold all 100, some 290 MB: 2.2 times the bound; 300 schemas, which this test
compiled before, took three times as long and told nothing more). The bound is loose on purpose:
allocators keep freed memory for reuse, differently on every machine.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from pyagent_core.interfaces.grammar import ConstraintSpec
from pyagent_core.registry import Registry
from pyagent_engine.api.llm import LLM
from pyagent_engine.requests.structured_params import StructuredOutputParams
from pyagent_engine.structured.orchestrator import GrammarOrchestrator, StructuredConfig

LIMIT = 16 * 2**20
RSS_BOUND = 128 * 2**20
SCHEMAS = 100


def rss() -> int:
    """This process's resident set size, in bytes."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS in /proc/self/status")


def schema(index: int) -> dict[str, object]:
    """A JSON schema no other index gives."""
    return {"type": "object", "properties": {f"field_{index}": {"type": "string"},
                                             "count": {"type": "integer", "minimum": index}},
            "required": [f"field_{index}"]}


def test_100_schemas_stay_within_the_cache_bytes(registry: Registry, llm: LLM) -> None:
    orchestrator = GrammarOrchestrator(registry, llm.engine.structured.tokenizer_info,
                                       StructuredConfig(fallback_order=("xgrammar",), cache_bytes=LIMIT))
    try:
        first = orchestrator.compile(StructuredOutputParams(constraint=ConstraintSpec(json_schema=schema(-1))))
        if first.backend != "xgrammar":
            pytest.skip("xgrammar is not installed")
        size = first.grammar.memory_bytes()
        assert size is not None and size > 2**20  # a real token-mask cache, so 100 of them would show
        for index in range(4):  # the allocator's pools warmed up before the baseline
            orchestrator.compile(StructuredOutputParams(constraint=ConstraintSpec(json_schema=schema(-2 - index))))
        baseline = rss()
        for index in range(SCHEMAS):
            orchestrator.compile(StructuredOutputParams(constraint=ConstraintSpec(json_schema=schema(index))))
            assert orchestrator.cache.stats.weight <= LIMIT
        grown = rss() - baseline
    finally:
        orchestrator.close()
    assert 0 < len(orchestrator.cache) <= LIMIT // size
    assert orchestrator.cache.stats.evictions >= SCHEMAS - LIMIT // size
    assert grown < RSS_BOUND, f"RSS grew by {grown / 2**20:.0f} MiB over {SCHEMAS} schemas"
