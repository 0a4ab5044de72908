"""The engine on the real model: batching, chunked prefill and preemption never change greedy output;
stop conditions, streaming and bad input behave; every hook fires."""

from __future__ import annotations

import attrs
import pytest

from pyagent_core import hookimpl
from pyagent_core.errors import RequestError
from pyagent_core.records import EngineInfo, RequestInfo
from pyagent_core.records import StepStats as StepStatsRecord
from pyagent_core.registry import get_registry
from pyagent_engine.requests.params import SamplingParams

GREEDY = SamplingParams(temperature=0, max_tokens=24)


def ids(outputs):
    return [o.output_token_ids for o in outputs]


def test_greedy_output_is_identical_alone_and_batched_with_15_others(llm_bf16, prompts):
    batched = llm_bf16.generate(list(prompts), GREEDY, chat=True)
    alone = [llm_bf16.generate([p], GREEDY, chat=True)[0] for p in prompts[:4]]
    assert ids(alone) == ids(batched[:4])
    assert all(o.error is None and o.output_token_ids for o in batched)


class StepStats:
    """Collects the stats of every step."""

    def __init__(self) -> None:
        self.steps: list[dict] = []

    @hookimpl
    def pyagent_step_finished(self, engine, stats):
        self.steps.append(attrs.asdict(stats))


def test_chunked_prefill_and_preemption_do_not_change_greedy_output(llm_bf16, prompts, engine_factory):
    reference = ids(llm_bf16.generate(list(prompts[:6]), GREEDY, chat=True))
    tight = engine_factory("bfloat16", max_num_batched_tokens=16, max_num_seqs=6, kv_cache_gib=0.004)
    recorder = StepStats()
    tight.engine.registry.pm.register(recorder, name="step-stats")
    try:
        squeezed = ids(tight.generate(list(prompts[:6]), GREEDY, chat=True))
    finally:
        tight.engine.registry.pm.unregister(recorder)
        tight.close()
    assert squeezed == reference
    assert max(s["num_scheduled_tokens"] for s in recorder.steps) <= 16
    assert sum(s["num_preempted"] for s in recorder.steps) > 0, "the test meant to force preemption"


def test_stop_string_max_tokens_and_eos(llm_bf16):
    free = llm_bf16.generate(["What is the capital of France?"], SamplingParams(temperature=0, max_tokens=64),
                             chat=True)[0]
    assert free.finish_reason == "stop" and "Paris" in free.text
    cut = llm_bf16.generate(["What is the capital of France?"],
                            SamplingParams(temperature=0, max_tokens=64, stop=("Paris",)), chat=True)[0]
    assert cut.finish_reason == "stop" and "Paris" not in cut.text and free.text.startswith(cut.text)
    short = llm_bf16.generate(["What is the capital of France?"], SamplingParams(temperature=0, max_tokens=3),
                              chat=True)[0]
    assert short.finish_reason == "length" and len(short.output_token_ids) == 3


def test_streamed_deltas_concatenate_to_the_final_text(llm_bf16):
    deltas: dict[str, str] = {}
    finals = {}
    prompts = ["Write the word 'café' and a Japanese greeting.", "Count from 1 to 5."]
    for output in llm_bf16.stream(prompts, SamplingParams(temperature=0, max_tokens=30), chat=True):
        deltas[output.request_id] = deltas.get(output.request_id, "") + output.delta
        if output.finished:
            finals[output.request_id] = output.text
    assert deltas == finals and all(finals.values())


def test_seeded_sampling_is_reproducible_across_batches(llm_bf16):
    params = SamplingParams(temperature=0.9, top_p=0.95, max_tokens=16, seed=1234)
    alone = llm_bf16.generate(["Tell me a joke."], params, chat=True)[0]
    batched = llm_bf16.generate(["Tell me a joke.", "Name a color.", "Say hi."], params, chat=True)[0]
    assert alone.output_token_ids == batched.output_token_ids


@pytest.mark.parametrize(
    ("prompt", "message"),
    [("", "the prompt is empty"), ("word " * 9000, "the model's context is"),
     ("x \ud800", "a lone surrogate (\\ud800) at character 2 is not Unicode text"),
     ("word " * 8150, "tokens and max_tokens is 100: "),
     ([{"role": "user", "content": "x \udcff"}], "a lone surrogate (\\udcff)")],
)
def test_bad_prompt_fails_alone_and_the_others_finish(llm_bf16, prompt, message):
    outputs = llm_bf16.generate(["Say A.", prompt, "Say C."], SamplingParams(temperature=0, max_tokens=100))
    assert [o.error for o in (outputs[0], outputs[2])] == [None, None] and outputs[2].output_token_ids
    assert outputs[1].finish_reason == "error" and message in outputs[1].error, outputs[1].error


def test_prompt_and_max_tokens_over_the_context_is_refused_not_clipped(llm_bf16):
    """As vLLM's server and OpenAI: the output is never silently cut short by the context."""
    prompt = "word " * 8000
    count = len(llm_bf16.tokenizer.encode(prompt))
    [over] = llm_bf16.generate([prompt], SamplingParams(temperature=0, max_tokens=1000))
    assert over.error == (f"the prompt has {count} tokens and max_tokens is 1000: {count + 1000} tokens, over the "
                          f"model's context of 8192; lower max_tokens to at most {8192 - count} or shorten the prompt")


@pytest.mark.parametrize(("extra", "message"), [
    ({"no_such": 1}, "unknown sampling parameter 'no_such'"),
    ({"min_p": "x"}, "min_p"),
])
def test_a_bad_sampler_parameter_raises_before_anything_runs(llm_bf16, extra, message):
    """As SamplingParams(temperature=-1) does: the call raises, no request is added."""
    added = llm_bf16.engine.next_request_id()
    for call in (lambda p: llm_bf16.generate(["Say hi.", "Say ho."], p),
                 lambda p: next(llm_bf16.stream(["Say hi."], p)),
                 lambda p: llm_bf16.generate(["Say hi."], [p])):
        with pytest.raises(RequestError, match=message):
            call(SamplingParams(max_tokens=2, extra=extra))
    assert int(llm_bf16.engine.next_request_id()) == int(added) + 1  # none was added in between


class HookRecorder:
    """Counts every lifecycle hook the engine fires."""

    def __init__(self) -> None:
        self.seen: dict[str, int] = {}
        self.finished: list = []

    def _count(self, name: str) -> None:
        self.seen[name] = self.seen.get(name, 0) + 1

    @hookimpl
    def pyagent_request_added(self, engine, request):
        self._count("pyagent_request_added")

    @hookimpl
    def pyagent_request_finished(self, engine, request, reason):
        self._count("pyagent_request_finished")
        self.finished.append((engine, request, reason))

    @hookimpl
    def pyagent_step_finished(self, engine, stats):
        assert isinstance(stats, StepStatsRecord) and stats.num_scheduled_tokens > 0
        self._count("pyagent_step_finished")

    @hookimpl
    def pyagent_engine_stopped(self, engine):
        self._count("pyagent_engine_stopped")


def test_engine_fires_the_lifecycle_hooks(llm_bf16):
    recorder = HookRecorder()
    registry = get_registry()
    registry.pm.register(recorder, name="test-recorder")
    try:
        llm_bf16.generate(["Say hi.", "Say bye."], SamplingParams(temperature=0, max_tokens=3), chat=True)
    finally:
        registry.pm.unregister(recorder)
    assert recorder.seen["pyagent_request_added"] == 2
    assert recorder.seen["pyagent_request_finished"] == 2
    assert recorder.seen["pyagent_step_finished"] >= 3
    for engine, request, reason in recorder.finished:  # frozen snapshots, never the engine's own objects
        assert isinstance(engine, EngineInfo) and isinstance(request, RequestInfo)
        assert engine == llm_bf16.engine.info and engine.backends["attention"] == llm_bf16.engine.backends["attention"]
        assert reason == request.finish_reason == "length" and len(request.output_token_ids) == 3
        assert request.params["max_tokens"] == 3 and request.finish_time >= request.arrival_time
