"""The adapter's pure-Python pieces, without vLLM: BatchUpdate translation, parameter checks, listing.

The translation is checked against vLLM's own semantics (the dict bookkeeping of vLLM's built-in
``process_dict_updates``, restated here as the oracle) on batch histories shaped the way vLLM's
persistent batch makes them: removals, additions into the lowest holes, condensing moves and swaps.
"""

from __future__ import annotations

import enum
import logging
from types import SimpleNamespace
from typing import Any, NamedTuple

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from pyagent_core.errors import RequestError, SelectionError
from pyagent_core.interfaces.sampler import Sampler, SamplerContext
from pyagent_core.registry import get_registry
from pyagent_vllm.batch import request_params, translate
from pyagent_vllm.chain import UNBOUNDED_VOCAB, HostedChain
from pyagent_vllm.inventory import NATIVE_IN_VLLM, ORDER_ENV, hosted_order, inventory, split_by_invariance


class MoveDirectionality(enum.Enum):
    """vLLM's enum, by member name (the adapter reads ``.name``)."""

    UNIDIRECTIONAL = enum.auto()
    SWAP = enum.auto()


class VllmUpdate(NamedTuple):
    batch_size: int
    removed: list[int]
    added: list[tuple[int, Any, list[int] | None, list[int]]]
    moved: list[tuple[int, int, MoveDirectionality]]


def params(request_id: int, **extra: Any) -> SimpleNamespace:
    """A stand-in for vLLM's SamplingParams with the fields the adapter reads."""
    return SimpleNamespace(extra_args={"id": request_id, **extra}, seed=None, all_stop_token_ids={2})


def oracle(state: dict[int, int], update: VllmUpdate) -> None:
    """vLLM's ``process_dict_updates``: row -> request id."""
    for index, sampling, _prompt, _output in update.added:
        state[index] = sampling.extra_args["id"]
    for index in update.removed:
        state.pop(index, None)
    for a, b, direction in update.moved:
        a_entry, b_entry = state.pop(a, None), state.pop(b, None)
        if a_entry is not None:
            state[b] = a_entry
        if b_entry is not None and direction is MoveDirectionality.SWAP:
            state[a] = b_entry


@st.composite
def histories(draw: st.DrawFn) -> list[VllmUpdate]:
    """Batch updates as vLLM's persistent batch makes them."""
    rows: list[int] = []
    next_id = 0
    updates = []
    for _ in range(draw(st.integers(1, 8))):
        removed = sorted(draw(st.sets(st.sampled_from(range(len(rows))), max_size=len(rows))) if rows else set())
        holes = list(removed)
        slots: list[int | None] = list(rows)
        added: list[tuple[int, Any, list[int] | None, list[int]]] = []
        for _ in range(draw(st.integers(0, 4))):
            index = holes.pop(0) if holes else len(slots)
            if index == len(slots):
                slots.append(None)
            slots[index] = next_id
            added.append((index, params(next_id), [1, 2] if next_id % 2 else None, []))
            next_id += 1
        for hole in holes:  # vLLM's builder reuses removed rows for additions: only the rest count as removed
            slots[hole] = None
        removed = list(holes)
        moved = []
        for hole in sorted(holes):  # condense: the last live row moves into each hole below it
            while slots and slots[-1] is None:
                slots.pop()
            if hole >= len(slots):
                break
            slots[hole] = slots.pop()
            moved.append((len(slots), hole, MoveDirectionality.UNIDIRECTIONAL))
        while slots and slots[-1] is None:
            slots.pop()
        for a, b in draw(st.lists(st.tuples(st.integers(0, 7), st.integers(0, 7)), max_size=3)):
            if a < len(slots) and b < len(slots) and a != b:
                slots[a], slots[b] = slots[b], slots[a]
                moved.append((a, b, MoveDirectionality.SWAP))
        rows = [r for r in slots if r is not None]
        updates.append(VllmUpdate(len(rows), removed, added, moved))
    return updates


@settings(max_examples=60, deadline=None)
@given(histories())
def test_translated_updates_put_every_request_where_vllm_has_it(updates: list[VllmUpdate]) -> None:
    sampler = Sampler({}, SamplerContext(10))
    expected: dict[int, int] = {}
    for update in updates:
        oracle(expected, update)
        sampler.update_state(translate(update))
        got = {i: state.params["id"] for i, state in enumerate(sampler.rows.states) if state is not None}
        assert got == expected
        assert len(sampler.rows) == update.batch_size


def test_added_rows_carry_the_live_output_list_and_prompt() -> None:
    output: list[int] = []
    update = VllmUpdate(1, [], [(0, params(7), None, output)], [])
    added = translate(update).added[0]  # type: ignore[union-attr]
    assert added.output_token_ids is output and added.prompt_token_ids == ()
    assert translate(None) is None


def test_request_params_take_extra_args_seed_and_stop_ids() -> None:
    sampling = SimpleNamespace(extra_args={"dry_multiplier": 0.5}, seed=11, all_stop_token_ids={5, 2})
    assert request_params(sampling) == {"dry_multiplier": 0.5, "seed": 11, "eos_token_ids": [2, 5]}


def test_a_bad_parameter_is_a_request_error_naming_it() -> None:
    chain = HostedChain(get_registry(), ("no_repeat_ngram", "dry"), UNBOUNDED_VOCAB)
    with pytest.raises(RequestError, match="dry_multiplier"):
        chain.check({"dry_multiplier": -1.0})
    with pytest.raises(RequestError, match="no_repeat_ngram_size"):
        chain.check({"no_repeat_ngram_size": "three"})
    chain.check({"dry_multiplier": 0.8, "no_repeat_ngram_size": 3})


def test_an_id_outside_the_vocabulary_drops_that_request_only(caplog: pytest.LogCaptureFixture) -> None:
    """The front end cannot check token ids against the vocabulary; the engine-side chain runs the
    bad request unprocessed and logs why, the other request keeps its processor."""
    chain = HostedChain(get_registry(), ("suppress_tokens",), 8)
    bad = SimpleNamespace(extra_args={"suppress_tokens": [99]}, seed=None, all_stop_token_ids=set())
    good = SimpleNamespace(extra_args={"suppress_tokens": [1]}, seed=None, all_stop_token_ids=set())
    with caplog.at_level(logging.ERROR, logger="pyagent_vllm"):
        chain.update_state(VllmUpdate(2, [], [(0, bad, None, []), (1, good, None, [])], []))
    assert "suppress_tokens" in caplog.text
    out = chain.apply(torch.zeros(2, 8))
    assert torch.isfinite(out[0]).all() and out[1, 1] == float("-inf") and torch.isfinite(out[1, [0, 2]]).all()


def test_default_hosted_set_leaves_out_what_vllm_has(monkeypatch: pytest.MonkeyPatch) -> None:
    registry = get_registry()
    monkeypatch.delenv(ORDER_ENV, raising=False)
    hosted = hosted_order(registry)
    assert {"dry", "xtc", "no_repeat_ngram", "mirostat", "typical"} <= set(hosted)
    assert not set(hosted) & set(NATIVE_IN_VLLM)
    assert hosted_order(registry, {ORDER_ENV: "penalties, dry"}) == ("penalties", "dry")
    assert hosted_order(registry, {ORDER_ENV: ""}) == ()
    with pytest.raises(SelectionError, match="twice"):
        hosted_order(registry, {ORDER_ENV: "dry,dry"})
    assert split_by_invariance(registry, ("dry", "mirostat", "xtc"), True) == ("mirostat",)
    report = inventory(registry, {})
    assert "pyagent-hermes" in report["tool_parsers"] and "pyagent-qwen3" in report["reasoning_parsers"]


def test_a_token_selector_cannot_be_hosted() -> None:
    with pytest.raises(SelectionError, match="token selector"):
        HostedChain(get_registry(), ("greedy",), 8)
