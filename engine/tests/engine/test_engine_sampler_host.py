"""The engine's sampler host over engine requests: parameter checks (a bad value, a parameter no sampler
reads, one whose stage the chain lacks), the neutral fields left out, the greedy shortcut, batch
invariance across every installed processor, and clashing names (no model needed)."""

from __future__ import annotations

import pytest
import torch

from pyagent_core import hookimpl
from pyagent_core.errors import AmbiguousBackendError, RequestError, UnknownBackendError
from pyagent_core.kinds import SAMPLER
from pyagent_core.registry import Registry, get_registry
from pyagent_core.types import SamplerSpec
from pyagent_engine.requests.params import SamplingParams
from pyagent_engine.requests.request import Request
from pyagent_engine.sampling.host import request_row, sampler_host
from pyagent_sampler_host.parameters import request_parameters

VOCAB = 300
ACTIVE = {  # parameters that switch every installed processor of this task on
    "typical_p": 0.95, "epsilon_cutoff": 1e-4, "eta_cutoff": 1e-4, "top_n_sigma": 3.0, "dynatemp_range": 0.3,
    "dry_multiplier": 0.8, "xtc_probability": 0.5, "mirostat": 2, "no_repeat_ngram_size": 3,
    "logit_bias": {5: 2.0}, "bad_words_ids": [[1, 2]], "suppress_tokens": [7], "min_tokens": 2,
}


def request(key: int, temperature: float = 0.9, **extra) -> Request:
    prompt = [(key * 7 + i) % 50 for i in range(12)]
    return Request(f"r{key}", prompt, SamplingParams(temperature=temperature, seed=key, extra={**ACTIVE, **extra}))


@pytest.mark.parametrize(("extra", "message"), [
    ({"typical_p": 1.5}, "^request: typical_p=1.5 is invalid; typical_p must be a number in"),
    ({"dry_base": 0.5}, "dry_base=0.5 is invalid"),
    ({"mirostat": 3}, "mirostat=3 is invalid"),
    ({"logit_bias": {VOCAB: 1.0}}, "logit_bias holds token ids"),
    ({"suppress_tokens": [-1]}, "suppress_tokens=.* is invalid"),
])
def test_bad_parameters_are_rejected_when_the_request_is_checked(extra, message):
    with pytest.raises(RequestError, match=message):
        sampler_host(get_registry(), VOCAB).check_params(request(0, **extra))


def test_the_engines_own_fields_at_their_neutral_value_are_left_out():
    row = request_row([2])(Request("r", [1], SamplingParams(stop_token_ids=(9,))))
    assert row.params == {"eos_token_ids": [2, 9]}  # temperature 1, top_k 0, top_p 1, no seed: nothing set
    row = request_row([2])(Request("r", [1], SamplingParams(temperature=0, top_k=5, seed=3, ignore_eos=True)))
    assert row.params == {"temperature": 0, "top_k": 5, "seed": 3, "eos_token_ids": []} and row.greedy


@pytest.mark.parametrize(("params", "message"), [
    (SamplingParams(temperature=0.01), r"temperature=0.01 needs a sampler the chain \(top_k,multinomial\) lacks"),
    (SamplingParams(top_p=0.5), r"top_p=0.5 needs a sampler the chain \(top_k,multinomial\) lacks"),
    (SamplingParams(extra={"min_p": 0.1}), r"min_p=0.1 needs a sampler the chain \(top_k,multinomial\) lacks"),
    (SamplingParams(extra={"top_kk": 5}), r"unknown sampling parameter 'top_kk'.*did you mean 'top_k'\?"),
])
def test_a_parameter_the_chain_has_no_sampler_for_is_an_error_naming_it_and_the_chain(params, message):
    """Issue 27: --samplers top_k --temperature 0.01 sampled at temperature 1 without a word."""
    host = sampler_host(get_registry(), VOCAB, "top_k")
    with pytest.raises(RequestError, match=message):
        host.check_params(Request("r", [1], params))
    host.check_params(Request("r", [1], SamplingParams(temperature=0, top_k=4, seed=1)))  # greedy needs no stage


def test_every_declared_parameter_is_read_by_the_default_chain():
    host = sampler_host(get_registry(), VOCAB)
    for name in request_parameters(b.spec for b in get_registry().backends(SAMPLER)):
        for value in (0, 1, [1], {1: 1.0}, "x"):
            try:
                host.check_params(Request("r", [1], SamplingParams(extra={name: value})))
            except RequestError as error:
                assert "needs a sampler" not in str(error) and "unknown sampling parameter" not in str(error)


def test_greedy_batches_skip_argmax_invariant_processors_after_the_last_other_one():
    host = sampler_host(get_registry(), VOCAB, "temperature,logit_bias,top_k,mirostat")
    assert host.chain.greedy_prefix == 2
    logits = torch.randn(1, VOCAB)
    logits[0, 3] = 10.0
    # temperature 0 is greedy; the bias must still decide the token
    biased = Request("g", [1, 2], SamplingParams(temperature=0, extra={"logit_bias": {9: 100.0}}))
    assert host.sample([biased], logits) == [9]


def test_tokens_do_not_depend_on_the_batch():
    """Each seeded request draws the same tokens alone as in a batch whose members change."""
    generator = torch.Generator().manual_seed(0)
    steps = [torch.randn(6, VOCAB, generator=generator) * 3 for _ in range(6)]

    def run(keys_per_step):
        host = sampler_host(get_registry(), VOCAB, eos_token_ids=(0,))
        requests = {k: request(k) for k in range(6)}
        tokens: dict[int, list[int]] = {k: [] for k in requests}
        for step, keys in enumerate(keys_per_step):
            batch = [requests[k] for k in keys]
            for key, token in zip(keys, host.sample(batch, torch.stack([steps[step][k] for k in keys])),
                                  strict=True):
                requests[key].output_token_ids.append(token)
                tokens[key].append(token)
        return tokens

    batched = run([[0, 1, 2], [2, 0, 3, 1], [4, 0, 2], [0, 5, 2, 1], [2, 0], [1, 0, 2, 3]])
    alone = run([[0]] * 6)
    assert batched[0] == alone[0]
    alone_two = run([[2]] * 6)
    assert batched[2] == alone_two[2]


class _Registers:
    """A plugin registering one sampler spec."""

    def __init__(self, spec: SamplerSpec) -> None:
        self.spec = spec

    @hookimpl
    def pyagent_register_samplers(self, register):
        register(self.spec)


def test_a_name_two_third_parties_claim_is_chosen_in_the_order_as_the_error_advises():
    top_k = get_registry().get("sampler", "top_k").spec
    twins = [(plugin, _Registers(SamplerSpec(name="twin", impl=top_k.impl, options=dict(top_k.options))))
             for plugin in ("twin-a", "twin-b")]
    registry = Registry(plugins=twins)
    with pytest.raises(AmbiguousBackendError, match="select one as DIST:NAME, one of: twin-a:twin, twin-b:twin"):
        sampler_host(registry, VOCAB, "twin")
    host = sampler_host(registry, VOCAB, "twin-b:twin,temperature", options={"twin-b:twin": {"top_k": "3"}})
    assert host.chain.selections[0].backend.plugin == "twin-b" and host.processors[0].options["top_k"] == 3
    with pytest.raises(UnknownBackendError, match="no sampler backend named 'twin-c:twin'"):
        sampler_host(registry, VOCAB, "twin-c:twin")


def test_a_third_party_top_k_leaves_the_default_chain_runnable_with_one_warning():
    """Issue 29: a distribution registering `top_k` beside the reference one made every default generate
    exit 2; the engine prefers the distribution it requires and says how to choose the other."""
    from pyagent_sampler_host.order import SamplerNameClashWarning

    reference = get_registry().get("sampler", "top_k").spec
    rival = SamplerSpec(name="top_k", impl=reference.impl, stage="truncation", position=20, argmax_invariant=True,
                        options=dict(reference.options))
    registry = Registry(plugins=[("acme-top-k", _Registers(rival))])
    with pytest.warns(SamplerNameClashWarning, match=r"the chain uses pyagent-samplers-reference's \(the "
                                                     r"distribution this host declares\); name acme-top-k:top_k"):
        host = sampler_host(registry, VOCAB)
    assert host.chain.selections[host.names.index("top_k")].backend.dist == "pyagent-samplers-reference"
    host.check_params(request(0, top_k=5))
    assert len(host.sample([request(0)], torch.randn(1, VOCAB))) == 1
    other = sampler_host(registry, VOCAB, "acme-top-k:top_k,temperature")
    assert other.chain.selections[0].backend.plugin == "acme-top-k"
