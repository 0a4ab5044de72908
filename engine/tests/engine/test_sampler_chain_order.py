"""The sampler chain's order string, its default, per-sampler options, parameter checks, the greedy
shortcut and batch invariance across every installed processor (no model needed)."""

from __future__ import annotations

import pytest
import torch

from pyagent_core import hookimpl
from pyagent_core.errors import (
    AmbiguousBackendError,
    OptionError,
    RequestError,
    SelectionError,
    UnknownBackendError,
)
from pyagent_core.registry import Registry, get_registry
from pyagent_core.types import SamplerSpec
from pyagent_engine.cli.sampler_flags import SAMPLER_FLAGS
from pyagent_engine.requests.params import SamplingParams
from pyagent_engine.requests.request import Request
from pyagent_engine.sampling.chain import SamplerChain, default_processor_order, parse_sampler_order

VOCAB = 300
# The default chain that sampling.py hard-coded before the stages were declared in the specs.
OLD_DEFAULT_ORDER = (
    "logit_bias,bad_words,allowed_token_ids,suppress_tokens,min_tokens,no_repeat_ngram,penalties,dry,"
    "top_n_sigma,top_k,typical,top_p,min_p,eta,epsilon,xtc,dynatemp,temperature,mirostat"
)
ACTIVE = {  # parameters that switch every installed processor of this task on
    "typical_p": 0.95, "epsilon_cutoff": 1e-4, "eta_cutoff": 1e-4, "top_n_sigma": 3.0, "dynatemp_range": 0.3,
    "dry_multiplier": 0.8, "xtc_probability": 0.5, "mirostat": 2, "no_repeat_ngram_size": 3,
    "logit_bias": {5: 2.0}, "bad_words_ids": [[1, 2]], "suppress_tokens": [7], "min_tokens": 2,
}


def request(key: int, temperature: float = 0.9, **extra) -> Request:
    prompt = [(key * 7 + i) % 50 for i in range(12)]
    return Request(f"r{key}", prompt, SamplingParams(temperature=temperature, seed=key, extra={**ACTIVE, **extra}))


def test_order_strings_parse_like_llama_cpp():
    assert parse_sampler_order("top_k; top_p typical,temperature") == ("top_k", "top_p", "typical", "temperature")
    assert parse_sampler_order("") == ()
    with pytest.raises(SelectionError, match="'top_k' twice"):
        parse_sampler_order("top_k,top_p,top_k")


def test_unknown_or_selector_names_list_the_processors():
    with pytest.raises(UnknownBackendError, match=r"'nope'; choose one of: .*temperature.*top_k"):
        SamplerChain(get_registry(), VOCAB, "top_k,nope")
    with pytest.raises(UnknownBackendError, match="end every chain by themselves"):
        SamplerChain(get_registry(), VOCAB, "top_k,greedy")


def test_default_chain_from_the_installed_specs_is_the_old_hard_coded_order():
    chain = SamplerChain(get_registry(), VOCAB)
    assert ",".join(chain.names[:-2]) == OLD_DEFAULT_ORDER
    assert chain.names[-2:] == ["greedy", "multinomial"]


def test_default_order_is_stage_then_position_then_name():
    def spec(name, stage=None, position=0, selects_token=False):
        return SamplerSpec(name=name, impl="m:C", stage=stage, position=position, selects_token=selects_token)

    specs = [spec("mirostat_like", "final"), spec("b", "truncation", 5), spec("a", "truncation", 5),
             spec("early", "truncation", -1), spec("ban", "constraints", 99), spec("hot", "temperature"),
             spec("named_only"), spec("pick", selects_token=True), spec("rep", "penalties", 1.5)]
    assert default_processor_order(specs) == ("ban", "rep", "early", "a", "b", "hot", "mirostat_like")


def test_sampler_options_reach_their_sampler_and_are_validated():
    chain = SamplerChain(get_registry(), VOCAB, "xtc,temperature", options={"xtc": {"xtc_threshold": "0.2"}})
    assert chain.processors[0].options["xtc_threshold"] == 0.2
    with pytest.raises(OptionError, match=r"'xtc_threshold'.*<= 1\.0"):
        SamplerChain(get_registry(), VOCAB, "xtc", options={"xtc": {"xtc_threshold": "3"}})
    with pytest.raises(SelectionError, match="'dry', which is not in the chain"):
        SamplerChain(get_registry(), VOCAB, "xtc", options={"dry": {"dry_base": "2"}})


@pytest.mark.parametrize(("extra", "message"), [
    ({"typical_p": 1.5}, "typical_p=1.5 is invalid; typical_p must be a number in"),
    ({"dry_base": 0.5}, "dry_base=0.5 is invalid"),
    ({"mirostat": 3}, "mirostat=3 is invalid"),
    ({"logit_bias": {VOCAB: 1.0}}, "logit_bias holds token ids"),
    ({"suppress_tokens": [-1]}, "suppress_tokens=.* is invalid"),
])
def test_bad_parameters_are_rejected_when_the_request_is_checked(extra, message):
    chain = SamplerChain(get_registry(), VOCAB)
    with pytest.raises(RequestError, match=message):
        chain.check_params(request(0, **extra))


def test_greedy_batches_skip_argmax_invariant_processors_after_the_last_other_one():
    chain = SamplerChain(get_registry(), VOCAB, "temperature,logit_bias,top_k,mirostat")
    assert chain.greedy_prefix == 2
    logits = torch.randn(1, VOCAB)
    logits[0, 3] = 10.0
    # temperature 0 is greedy; the bias must still decide the token
    biased = Request("g", [1, 2], SamplingParams(temperature=0, extra={"logit_bias": {9: 100.0}}))
    assert chain.sample([biased], logits) == [9]


def test_tokens_do_not_depend_on_the_batch():
    """Each seeded request draws the same tokens alone as in a batch whose members change."""
    generator = torch.Generator().manual_seed(0)
    steps = [torch.randn(6, VOCAB, generator=generator) * 3 for _ in range(6)]

    def run(keys_per_step):
        chain = SamplerChain(get_registry(), VOCAB, eos_token_ids=(0,))
        requests = {k: request(k) for k in range(6)}
        tokens: dict[int, list[int]] = {k: [] for k in requests}
        for step, keys in enumerate(keys_per_step):
            batch = [requests[k] for k in keys]
            for key, token in zip(keys, chain.sample(batch, torch.stack([steps[step][k] for k in keys])),
                                  strict=True):
                requests[key].output_token_ids.append(token)
                tokens[key].append(token)
        return tokens

    batched = run([[0, 1, 2], [2, 0, 3, 1], [4, 0, 2], [0, 5, 2, 1], [2, 0], [1, 0, 2, 3]])
    alone = run([[0]] * 6)
    assert batched[0] == alone[0]
    alone_two = run([[2]] * 6)
    assert batched[2] == alone_two[2]


def test_a_parameter_no_sampler_reads_is_an_error_naming_the_closest():
    chain = SamplerChain(get_registry(), VOCAB)
    with pytest.raises(RequestError, match=r"unknown sampling parameter 'top_kk'.*did you mean 'top_k'\?"):
        chain.check_params(Request("r", [1], SamplingParams(extra={"top_kk": 5})))
    with pytest.raises(RequestError, match=r"'min_p': no sampler of the chain \(top_k,greedy,multinomial\)"):
        SamplerChain(get_registry(), VOCAB, "top_k").check_params(
            Request("r", [1], SamplingParams(extra={"min_p": 0.1})))


@pytest.mark.parametrize("name", [flag.param for flag in SAMPLER_FLAGS])
def test_every_sampler_flag_of_the_cli_is_a_parameter_the_default_chain_reads(name):
    """The CLI's flag table is an independent list of the shipped samplers' parameters."""
    for value in (0, 1, [1], {1: 1.0}, "x"):
        try:
            SamplerChain(get_registry(), VOCAB).check_params(Request("r", [1], SamplingParams(extra={name: value})))
        except RequestError as error:
            assert "unknown sampling parameter" not in str(error)


class _Registers:
    """A plugin registering one sampler spec."""

    def __init__(self, spec: SamplerSpec) -> None:
        self.spec = spec

    @hookimpl
    def pyagent_register_samplers(self, register):
        register(self.spec)


def test_a_name_two_plugins_claim_is_chosen_in_the_order_as_the_error_advises():
    top_k = get_registry().get("sampler", "top_k").spec
    twins = [(plugin, _Registers(SamplerSpec(name="twin", impl=top_k.impl, options=dict(top_k.options))))
             for plugin in ("twin-a", "twin-b")]
    registry = Registry(plugins=twins)
    with pytest.raises(AmbiguousBackendError, match="select one as DIST:NAME, one of: twin-a:twin, twin-b:twin"):
        SamplerChain(registry, VOCAB, "twin")
    chain = SamplerChain(registry, VOCAB, "twin-b:twin,temperature", options={"twin-b:twin": {"top_k": "3"}})
    assert chain.selections[0].backend.plugin == "twin-b" and chain.processors[0].options["top_k"] == 3
    with pytest.raises(UnknownBackendError, match="no sampler processor backend named 'twin-c:twin'"):
        SamplerChain(registry, VOCAB, "twin-c:twin")
