"""The sampler host: stable rows, token selection with greedy rows, and the parameter checks."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from sampler_host_doubles import SELECTOR, SHIFT, LowestIdSelector, Req, describe, registry

from pyagent_core.errors import RequestError
from pyagent_core.interfaces.sampler import RequestRows
from pyagent_core.registry import get_registry
from pyagent_sampler_host.host import SamplerHost
from pyagent_sampler_host.rows import StableRows

VOCAB = 300
POOL = [Req({"seed": i}) for i in range(12)]


@given(st.lists(st.lists(st.sampled_from(range(12)), unique=True), max_size=15))
def test_updates_replayed_on_request_rows_match_the_host_rows(batches: list[list[int]]) -> None:
    rows: StableRows[Req] = StableRows(describe)
    replica = RequestRows()
    for batch in batches:
        sampled = [POOL[i] for i in batch]
        before = {id(r): i for i, r in enumerate(rows.rows)}
        update = rows.update(sampled)
        assert sorted(id(r) for r in rows.rows) == sorted(id(r) for r in sampled)
        if update is not None:
            replica.apply(update, lambda added: added.params["seed"])
            moved = {m.src for m in update.moved}
            for i, request in enumerate(rows.rows):  # a request changes rows only by an explicit move
                if id(request) in before and before[id(request)] not in moved:
                    assert before[id(request)] == i
        assert [replica[i] for i in range(len(replica))] == [r.params["seed"] for r in rows.rows]


def test_an_unchanged_batch_reports_no_update() -> None:
    rows: StableRows[Req] = StableRows(describe)
    assert rows.update(POOL[:3]) is not None
    assert rows.update(list(reversed(POOL[:3]))) is None


def logits_with_argmax(argmax: list[int]) -> torch.Tensor:
    logits = torch.randn(len(argmax), VOCAB, generator=torch.Generator().manual_seed(1))
    for row, token in enumerate(argmax):
        logits[row, token] = 50.0
    return logits


def test_greedy_rows_take_the_argmax_and_the_others_the_selectors_token() -> None:
    host = SamplerHost(registry(SELECTOR), VOCAB, "temperature,tp_lowest", describe=describe)
    selector = host.selector
    assert isinstance(selector, LowestIdSelector)
    logits = logits_with_argmax([7, 9, 11])
    logits[:, 0] = float("-inf")  # the selector's lowest finite id is then 1
    requests = [Req({"temperature": 0}), Req({"temperature": 0.5}), Req({"temperature": 0})]
    assert host.sample(requests, logits.clone()) == [7, 1, 11]
    assert len(selector.seen) == 1 and selector.seen[0].shape == (3, VOCAB)  # it saw every row
    assert torch.equal(selector.seen[0][1], logits[1] / 0.5) and torch.equal(selector.seen[0][0], logits[0])
    greedy = [Req({"temperature": 0}), Req({"temperature": 0})]
    assert host.sample(greedy, logits[:2].clone()) == [7, 9]
    assert len(selector.seen) == 1, "an all-greedy batch called the selector"


def test_a_greedy_tie_takes_the_lowest_token_id() -> None:
    host = SamplerHost(get_registry(), VOCAB, "top_k", describe=describe)
    logits = torch.zeros(1, VOCAB)
    logits[0, [40, 12, 200]] = 3.0
    assert host.sample([Req({"temperature": 0})], logits) == [12]
    assert host.greedy_rows([Req({"temperature": 0})], logits) == [12]


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), "all -inf"])
def test_a_greedy_row_without_a_choice_is_named(bad: float | str) -> None:
    """Through the C kernel when built (which refuses the row) and torch alike: the host's message."""
    host = SamplerHost(get_registry(), VOCAB, "top_k", describe=describe)
    logits = torch.zeros(2, VOCAB)
    if bad == "all -inf":
        logits[1] = float("-inf")
    else:
        logits[1, 5] = bad
    with pytest.raises(ValueError, match=r"greedy selection: cannot choose a token in rows \[1\]"):
        host.greedy_rows([Req({"temperature": 0}), Req({"temperature": 0})], logits)


def test_seeded_multinomial_draws_the_exponential_race_of_its_own_seed() -> None:
    """The default selector (multinomial) through the host, against the race restated here: token =
    argmax(softmax / Exp(1)) with the noise drawn from a generator seeded with the request's seed."""
    host = SamplerHost(get_registry(), VOCAB, "top_k,temperature", describe=describe)
    requests = [Req({"temperature": 0.8, "top_k": 20, "seed": 11}), Req({"temperature": 0}),
                Req({"temperature": 1.3, "seed": 5})]
    generators = {11: torch.Generator().manual_seed(11), 5: torch.Generator().manual_seed(5)}
    for step in range(4):
        logits = torch.randn(3, VOCAB, generator=torch.Generator().manual_seed(step)) * 3
        tokens = host.sample(requests, logits.clone())
        for row, request in enumerate(requests):
            params = request.params
            if params["temperature"] == 0:
                assert tokens[row] == int(logits[row].argmax())
                continue
            scaled = logits[row].clone()
            if params.get("top_k"):
                scaled[scaled < scaled.topk(params["top_k"]).values[-1]] = float("-inf")
            probs = (scaled / params["temperature"]).softmax(dim=0)
            race = torch.empty_like(probs).exponential_(generator=generators[params["seed"]])
            assert tokens[row] == int((probs / race.clamp(min=torch.finfo(race.dtype).tiny)).argmax()), step


def test_greedy_rows_is_a_plain_argmax_only_while_no_processor_would_act() -> None:
    host = SamplerHost(registry(SHIFT), VOCAB, "tp_shift", describe=describe)
    logits = logits_with_argmax([3, 4])
    assert host.greedy_rows([Req({"temperature": 0}), Req({"temperature": 0})], logits) == [3, 4]
    shifted = [Req({"temperature": 0}), Req({"temperature": 0, "shift": 1.0})]
    assert host.greedy_rows(shifted, logits) == [3, 4]  # tp_shift keeps the argmax: a greedy batch skips it
    assert host.greedy_rows(shifted, logits, whole=True) is None  # the whole chain would run it
    assert host.greedy_rows([Req({"temperature": 0}), Req({"temperature": 0.7})], logits) is None


@pytest.mark.parametrize(("order", "params", "message"), [
    ("top_k", {"temperature": 0.01},
     r"temperature=0.01 needs a sampler the chain \(top_k,multinomial\) lacks: temperature is read by temperature"),
    ("top_k", {"min_p": 0.1}, r"min_p=0.1 needs a sampler the chain \(top_k,multinomial\) lacks"),
    ("top_k", {"top_kk": 3}, r"unknown sampling parameter 'top_kk'.*did you mean 'top_k'"),
    (None, {"typical_p": 1.5}, r"^request: typical_p=1.5 is invalid; typical_p must be a number in \[0, 1\]"),
    (None, {"suppress_tokens": [VOCAB]}, r"^request: suppress_tokens holds token ids \[300\] outside the vocabulary"),
])
def test_a_request_the_chain_cannot_serve_is_refused_naming_the_parameter(order, params, message) -> None:
    host = SamplerHost(get_registry(), VOCAB, order, describe=describe)
    with pytest.raises(RequestError, match=message):
        host.check_params(Req(params))


def test_greedy_needs_no_temperature_processor_and_host_params_need_no_reader() -> None:
    host = SamplerHost(get_registry(), VOCAB, "top_k", describe=describe)
    host.check_params(Req({"temperature": 0, "top_k": 5, "seed": 3, "eos_token_ids": [2]}))
    host.check_params(Req({"temperature": None, "top_p": None}))  # None is unset
