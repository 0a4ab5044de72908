"""LoRA on the embedded SmolLM2-135M against Hugging Face peft.

Three adapters with random, non-zero weights, saved by peft itself: rank 8 on q/v, rank 16 on every
linear layer with rsLoRA, rank 4 on o/down with alpha != rank. The model is read by the engine's
loader and kept in its GGUF blocks (Q4_1/Q8_0: the base products stay the quantized kernel's, the
QLoRA case); peft runs transformers' Llama on the same weights dequantized, in float32 (the model
that made and saved the adapters) and in float64 (the saved adapters loaded by peft: the exact
values, as far as float32 can tell). Each adapter alone, then all three with the base model in one
batch of 8 sequences, gives float32 logits within 1e-4 of peft's float64 logits at every prompt and
generated position (and within 2e-4 of peft's float32 ones, which are themselves up to ~9e-5 off the
float64 values on this model, like transformers' base model), and greedy tokens that are peft's
argmax at every step; a row's bits are the same alone and in the batch. The q/v and rsLoRA adapters
converted to llama.cpp LoRA GGUFs give the same tokens and logits. At int8 products (the engine's
default) every adapter's greedy tokens are still peft's float64 argmax, and a mixed batch gives each
row's bits alone.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import torch

from pyagent_core.errors import ModelNotFoundError
from pyagent_core.interfaces.lora import LoRASettings
from pyagent_core.interfaces.model import ModelContext
from pyagent_core.kinds import ATTENTION
from pyagent_core.registry import Registry
from pyagent_core.testing.model import metadata
from pyagent_kernels.quantized import QuantizedWeight
from pyagent_model_base.decoder import DecoderLM
from pyagent_model_base.lora.gguf_adapter import write_gguf_adapter

os.environ["HF_HUB_OFFLINE"] = "1"  # transformers and peft must never reach for the hub
transformers = pytest.importorskip("transformers")
peft = pytest.importorskip("peft")
loader = pytest.importorskip("pyagent_engine.models.loader")
from pyagent_engine.testing.peft_adapters import (  # noqa: E402  (after the skips)
    ADAPTERS,
    dense_weights,
    load_peft_adapters,
    save_peft_adapters,
)

PROMPTS = ("The capital of France is", "Write a haiku about autumn leaves falling in the quiet")
NEW_TOKENS = 6
#: Our float32 logits against peft's float64 ones, and against peft's float32 ones.
ATOL, ATOL_FLOAT32 = 1e-4, 2e-4
BLOCK = 16


@pytest.fixture(scope="module")
def checkpoint() -> Any:
    """The embedded model as the engine's loader reads it (GGUF blocks kept)."""
    try:
        path = loader.resolve_model_path(None)
    except ModelNotFoundError as error:
        pytest.skip(f"the embedded model is not installed: {error}")
    return loader.read_model(path)[0]


@pytest.fixture(scope="module")
def prompts(checkpoint: Any) -> list[list[int]]:
    return [checkpoint.tokenizer.encode(p, add_special_tokens=False) for p in PROMPTS]


@pytest.fixture(scope="module")
def dense(checkpoint: Any) -> dict[str, torch.Tensor]:
    """The checkpoint's weights dequantized to float32."""
    return dense_weights(checkpoint)


@pytest.fixture(scope="module")
def saved(checkpoint: Any, dense: dict[str, torch.Tensor],
          tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, dict[str, Path]]:
    """peft's float32 model with the three adapters (random weights) on transformers' Llama of the same
    weights, and the folder peft saved each adapter in."""
    return save_peft_adapters(checkpoint, dense, tmp_path_factory.mktemp("peft"))


@pytest.fixture(scope="module")
def peft_float64(checkpoint: Any, dense: dict[str, torch.Tensor], saved: tuple[Any, dict[str, Path]]) -> Any:
    """peft's float64 model: transformers' Llama in float64 with the saved adapters loaded by peft."""
    return load_peft_adapters(checkpoint, dense, saved[1], torch.float64)


@pytest.fixture(scope="module")
def reference(saved: tuple[Any, dict[str, Path]], peft_float64: Any) -> Any:
    """``reference(name, ids)``: peft's float64 and float32 logits of every position of ``ids`` with
    adapter ``name`` (or "base"), kept for the next call with the same arguments."""
    models = {torch.float64: peft_float64, torch.float32: saved[0]}
    kept: dict[tuple[str, tuple[int, ...]], tuple[torch.Tensor, torch.Tensor]] = {}

    def logits(name: str, ids: Sequence[int]) -> tuple[torch.Tensor, torch.Tensor]:
        key = (name, tuple(ids))
        if key not in kept:
            found = []
            for model in models.values():
                if name != "base":
                    model.set_adapter(name)
                with torch.no_grad(), model.disable_adapter() if name == "base" else contextlib.nullcontext():
                    found.append(model(torch.tensor([list(ids)])).logits[0])
            kept[key] = (found[0], found[1])
        return kept[key]

    return logits


def with_adapters(checkpoint: Any, saved: tuple[Any, dict[str, Path]], precision: str) -> DecoderLM:
    """Our model (GGUF blocks kept, products at ``precision``) with the three adapters, read from peft's
    folders, in slots 0, 1, 2."""
    cls = checkpoint.architecture.model_class
    model = cls({}, ModelContext(config=checkpoint.config, weights=checkpoint.weights, dtype="float32",
                                 precision=precision))
    assert isinstance(model, DecoderLM) and isinstance(model.layers[0].qkv, QuantizedWeight)
    model.enable_lora(LoRASettings(max_loras=4, max_lora_rank=16))
    for slot, name in enumerate(ADAPTERS):
        model.load_lora(slot, cls.read_lora(saved[1][name], checkpoint.config))
    return model


@pytest.fixture(scope="module")
def ours(checkpoint: Any, saved: tuple[Any, dict[str, Path]]) -> DecoderLM:
    """Our model with the adapters, exact products (the dequantized weights' bits, as peft's)."""
    return with_adapters(checkpoint, saved, "exact")


@pytest.fixture(scope="module")
def ours_int8(checkpoint: Any, saved: tuple[Any, dict[str, Path]]) -> DecoderLM:
    """Our model with the adapters, int8 products (the engine's default for GGUF blocks)."""
    return with_adapters(checkpoint, saved, "int8")


def generate(model: DecoderLM, prompts: Sequence[Sequence[int]], slots: Sequence[int]) -> list[tuple[Any, Any, list]]:
    """Greedy decoding of every prompt in one batch (prefill together, then one token each per step), each
    with its LoRA slot: per prompt, (prompt logits, step logits, tokens)."""
    config = model.config
    registry = Registry().load_plugins()
    paged = registry.select(ATTENTION, "paged")
    attention = registry.load(paged.backend)(paged.options, type(model).attention_context(config, BLOCK, "float32"))
    count = [-(-(len(p) + NEW_TOKENS) // BLOCK) for p in prompts]
    tables = [list(range(sum(count[:i]), sum(count[: i + 1]))) for i in range(len(prompts))]
    caches = [torch.zeros(2, sum(count), BLOCK, config.num_kv_heads, config.head_dim) for _ in range(config.num_layers)]
    lengths = [len(p) for p in prompts]
    ids = torch.tensor([t for p in prompts for t in p])
    positions = torch.cat([torch.arange(n) for n in lengths])
    logits = model.forward(ids, positions, caches, metadata(tables, [0] * len(prompts), lengths, BLOCK), attention,
                           torch.arange(len(ids)), lora_slots=torch.tensor([s for s, n in zip(slots, lengths,
                                                                                             strict=True)
                                                                            for _ in range(n)]))
    ends = torch.tensor(lengths).cumsum(0)
    results = [(logits[end - n : end], [], []) for end, n in zip(ends.tolist(), lengths, strict=True)]
    last = logits[ends - 1]
    for step in range(NEW_TOKENS):
        tokens = last.argmax(-1)
        for row, result in enumerate(results):
            result[2].append(int(tokens[row]))
        if step == NEW_TOKENS - 1:
            break
        position = [n + step for n in lengths]
        step_metadata = metadata(tables, position, [1] * len(prompts), BLOCK)
        last = model.forward(tokens, torch.tensor(position), caches, step_metadata, attention,
                             torch.arange(len(prompts)), lora_slots=torch.tensor(slots))
        for row, result in enumerate(results):
            result[1].append(last[row])
    return [(prompt_logits, torch.stack(steps), tokens) for prompt_logits, steps, tokens in results]


def assert_matches(got: tuple[Any, Any, list], prompt: Sequence[int], name: str, reference: Any, what: str) -> None:
    """Our logits of the prompt and of every decode step within ATOL of peft's float64 logits of the same
    positions (and ATOL_FLOAT32 of its float32 ones), and each of our greedy tokens peft's argmax there:
    so peft's greedy decoding makes the same tokens."""
    prompt_logits, step_logits, tokens = got
    ours = torch.cat([prompt_logits, step_logits])
    exact, single = reference(name, [*prompt, *tokens[:-1]])
    chosen = exact[len(prompt) - 1 :].argmax(-1).tolist()
    assert chosen == tokens, f"{what}: our greedy tokens {tokens}, peft's argmax at those positions {chosen}"
    difference = (ours.double() - exact).abs().max().item()
    assert difference <= ATOL, f"{what}: logits differ from peft's float64 logits by {difference}"
    difference = (ours - single).abs().max().item()
    assert difference <= ATOL_FLOAT32, f"{what}: logits differ from peft's float32 logits by {difference}"


def slot_of(name: str) -> int:
    """The slot ``ours`` holds adapter ``name`` in (-1: the base model)."""
    return -1 if name == "base" else list(ADAPTERS).index(name)


@pytest.fixture(scope="module")
def alone(ours: DecoderLM, prompts: list[list[int]]) -> Any:
    """``alone(name, index)``: our greedy run of prompt ``index`` alone with adapter ``name`` (or "base"),
    kept for the next call."""
    kept: dict[tuple[str, int], tuple[Any, Any, list]] = {}

    def run(name: str, index: int) -> tuple[Any, Any, list]:
        if (name, index) not in kept:
            (kept[name, index],) = generate(ours, [prompts[index]], [slot_of(name)])
        return kept[name, index]

    return run


@pytest.mark.parametrize("name", list(ADAPTERS))
def test_each_adapter_alone_matches_peft(prompts: list[list[int]], reference: Any, alone: Any, name: str) -> None:
    for index, ids in enumerate(prompts):
        assert_matches(alone(name, index), ids, name, reference, f"{name} on prompt {index}")
    changed = [alone(name, index)[2] != alone("base", index)[2] for index in range(len(prompts))]
    assert any(changed), f"adapter {name} must change the base model's greedy tokens"


def test_a_batch_mixing_the_adapters_and_the_base_model_matches_peft(ours: DecoderLM, prompts: list[list[int]],
                                                                     reference: Any, alone: Any) -> None:
    rows = [("qv", 0), ("base", 1), ("all-rs", 1), ("od", 0), ("all-rs", 0), ("base", 0), ("od", 1), ("qv", 1)]
    results = generate(ours, [prompts[index] for _, index in rows], [slot_of(name) for name, _ in rows])
    for (name, index), got in zip(rows, results, strict=True):
        assert_matches(got, prompts[index], name, reference, f"{name} on prompt {index} in the mixed batch")
        single = alone(name, index)
        assert torch.equal(got[0], single[0]) and torch.equal(got[1], single[1]), "a row's bits depend on its batch"


@pytest.mark.parametrize("name", ["qv", "all-rs"])
def test_the_adapter_converted_to_gguf_gives_the_same_tokens(
        ours: DecoderLM, checkpoint: Any, saved: tuple[Any, dict[str, Path]], prompts: list[list[int]], alone: Any,
        tmp_path: Path, name: str) -> None:
    cls, config = type(ours), checkpoint.config
    path = tmp_path / f"{name}.gguf"
    write_gguf_adapter(cls.read_lora(saved[1][name], config), path, gguf_arch="llama",
                       gguf_names=cls.gguf_tensor_names(config), permuted_heads=cls.gguf_permuted_heads(config))
    converted = cls.read_lora(path, config)
    assert converted.format == "gguf" and converted.name == path.name
    ours.load_lora(3, converted)
    try:
        for index, ids in enumerate(prompts):
            (got,) = generate(ours, [ids], [3])
            from_peft_folder = alone(name, index)
            assert got[2] == from_peft_folder[2]
            torch.testing.assert_close(got[1], from_peft_folder[1], atol=1e-5, rtol=0)
    finally:
        ours.unload_lora(3)


def test_int8_products_take_the_adapters_too(ours_int8: DecoderLM, prompts: list[list[int]], reference: Any) -> None:
    """At int8 the LoRA calls follow the int8 linear calls of the step plan: each adapter's greedy tokens
    are peft's float64 argmax at every step (int8 moves the logits by quantization noise, about 1-2 here,
    while the adapters move them by 5-18), and a mixed batch gives each row's bits alone (a base row's
    alone: the plan without LoRA calls)."""
    rows = [(name, index) for name in ("base", *ADAPTERS) for index in range(len(prompts))]
    batch = generate(ours_int8, [prompts[index] for _, index in rows], [slot_of(name) for name, _ in rows])
    tokens = {}
    for (name, index), got in zip(rows, batch, strict=True):
        (single,) = generate(ours_int8, [prompts[index]], [slot_of(name)])
        assert torch.equal(got[0], single[0]) and torch.equal(got[1], single[1]), "a row's bits depend on its batch"
        exact, _ = reference(name, [*prompts[index], *got[2][:-1]])
        chosen = exact[len(prompts[index]) - 1 :].argmax(-1).tolist()
        assert got[2] == chosen, f"{name} on prompt {index} at int8: tokens {got[2]}, peft's argmax {chosen}"
        tokens[name, index] = got[2]
    for name in ADAPTERS:
        assert any(tokens[name, i] != tokens["base", i] for i in range(len(prompts))), f"{name} changes nothing"
