"""Which samplers a chain holds: order strings, the default from the specs, the selector stage chosen
through every selection source, and names that several distributions register."""

from __future__ import annotations

import warnings

import pytest
from sampler_host_doubles import SELECTOR, SHIFT, registry

from pyagent_core.errors import AmbiguousBackendError, NotSelectableError, SelectionError, UnknownBackendError
from pyagent_core.registry import get_registry
from pyagent_core.types import SamplerSpec
from pyagent_sampler_host.chain import Chain
from pyagent_sampler_host.order import (
    ChainResolver,
    SamplerNameClashWarning,
    default_processor_order,
    parse_sampler_order,
)

VOCAB = 300
# The default chain that the engine hard-coded before the stages were declared in the specs.
OLD_DEFAULT_ORDER = (
    "logit_bias,bad_words,allowed_token_ids,suppress_tokens,min_tokens,no_repeat_ngram,penalties,dry,"
    "top_n_sigma,top_k,typical,top_p,min_p,eta,epsilon,xtc,dynatemp,temperature,mirostat"
)


def test_order_strings_parse_like_llama_cpp() -> None:
    assert parse_sampler_order("top_k; top_p typical,temperature") == ("top_k", "top_p", "typical", "temperature")
    assert parse_sampler_order("") == ()
    with pytest.raises(SelectionError, match="'top_k' twice"):
        parse_sampler_order("top_k,top_p,top_k")


def test_default_order_is_stage_then_position_then_name() -> None:
    def spec(name: str, stage: str | None = None, position: float = 0) -> SamplerSpec:
        return SamplerSpec(name=name, impl="m:C", stage=stage, position=position)

    specs = [spec("mirostat_like", "final"), spec("b", "truncation", 5), spec("a", "truncation", 5),
             spec("early", "truncation", -1), spec("ban", "constraints", 99), spec("hot", "temperature"),
             spec("named_only"), spec("pick", "select"), spec("rep", "penalties", 1.5)]
    assert default_processor_order(specs) == ("ban", "rep", "early", "a", "b", "hot", "mirostat_like")


def test_the_default_chain_is_the_old_order_then_the_highest_priority_selector() -> None:
    chain = Chain(registry(), VOCAB)
    assert ",".join(chain.names[:-1]) == OLD_DEFAULT_ORDER
    assert chain.names[-1] == "multinomial" and chain.selector is not None


def test_a_selector_ends_an_order_string_and_nowhere_else() -> None:
    assert Chain(registry(), VOCAB, "top_k,temperature,gumbel").names == ["top_k", "temperature", "gumbel"]
    with pytest.raises(SelectionError, match="must end with at most one token selector"):
        Chain(registry(), VOCAB, "top_k,greedy,temperature")
    with pytest.raises(SelectionError, match="must end with at most one token selector"):
        Chain(registry(), VOCAB, "top_k,greedy,gumbel")
    with pytest.raises(SelectionError, match="runtime chooses the token"):
        Chain(registry(), VOCAB, "top_k,greedy", with_selector=False)
    with pytest.raises(UnknownBackendError, match=r"'nope'; choose one of: .*temperature.*top_k"):
        Chain(registry(), VOCAB, "top_k,nope")


@pytest.mark.parametrize("name", ["greedy", "gumbel", "tp_lowest"])
def test_every_selection_source_chooses_the_selector(tmp_path, name: str) -> None:
    """The environment, pyagent.toml and an explicit order each choose it; a third party's too."""
    assert Chain(registry(SELECTOR, environ={"PYAGENT_SAMPLER": name}), VOCAB, "top_k").names[-1] == name
    (tmp_path / "pyagent.toml").write_text(f'[sampler]\nbackend = "{name}"\n')
    from_file = registry(SELECTOR, cwd=tmp_path)
    assert Chain(from_file, VOCAB).names[-1] == name
    assert from_file.select("sampler").source.startswith("project file")
    # an explicit order beats the environment, which beats the file
    both = registry(SELECTOR, environ={"PYAGENT_SAMPLER": "greedy"}, cwd=tmp_path)
    assert Chain(both, VOCAB, "top_k").names[-1] == "greedy"
    assert Chain(both, VOCAB, f"top_k,{name}").names[-1] == name


def test_a_processor_is_never_the_sampler_selection() -> None:
    with pytest.raises(NotSelectableError, match=r"'top_k' \(from environment PYAGENT_SAMPLER\) is a logits "
                                                 r"processor.*one of: .*greedy.*multinomial"):
        Chain(registry(environ={"PYAGENT_SAMPLER": "top_k"}), VOCAB)


def test_a_clashing_name_prefers_the_hosts_distribution_and_warns_once() -> None:
    """Issue 29: a third party registering top_k must not break the default chain."""
    clash = SamplerSpec(name="top_k", impl=SHIFT.impl, stage="truncation", position=1, argmax_invariant=True)
    reg = registry(clash, plugin="acme-samplers")
    prefer = {"pyagent-samplers-reference"}
    with pytest.warns(SamplerNameClashWarning, match=r"'top_k' is registered by acme-samplers and "
                      r"pyagent-samplers-reference; the chain uses pyagent-samplers-reference's .*acme-samplers:top_k"):
        chain = Chain(reg, VOCAB, prefer=prefer)
    top_k = chain.selections[chain.names.index("top_k")].backend
    assert top_k.dist == "pyagent-samplers-reference"
    assert chain.names.count("top_k") == 1 and ",".join(chain.names[:-1]) == OLD_DEFAULT_ORDER
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # once per process: the second chain is silent
        Chain(reg, VOCAB, "top_k,temperature", prefer=prefer)
    assert Chain(reg, VOCAB, "acme-samplers:top_k").selections[0].backend.plugin == "acme-samplers"
    with pytest.raises(AmbiguousBackendError, match="acme-samplers:top_k"):
        Chain(reg, VOCAB, "top_k")  # an explicit bare name with no preferred distribution stays an error


def test_a_default_chain_clash_without_a_preference_still_runs() -> None:
    clash = SamplerSpec(name="typical", impl=SHIFT.impl, stage="truncation", position=30, priority=5,
                        argmax_invariant=True)
    with pytest.warns(SamplerNameClashWarning, match="the chain uses acme-typical's"):
        plan = ChainResolver(registry(clash, plugin="acme-typical")).plan(None)
    assert [b.plugin for b in plan.processors if b.name == "typical"] == ["acme-typical"]


def test_options_reach_their_sampler_and_name_only_chain_members() -> None:
    chain = Chain(get_registry(), VOCAB, "xtc,temperature", options={"xtc": {"xtc_threshold": "0.2"}})
    assert chain.processors[0].options["xtc_threshold"] == 0.2
    chain = Chain(get_registry(), VOCAB, "top_k", options={"multinomial": {"seed": "7"}})
    assert chain.selector is not None and chain.selector.options["seed"] == 7
    with pytest.raises(SelectionError, match="'dry', which is not in the chain"):
        Chain(get_registry(), VOCAB, "xtc", options={"dry": {"dry_base": "2"}})
