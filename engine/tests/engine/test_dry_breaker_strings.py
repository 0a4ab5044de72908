"""DRY's sequence breakers as strings through the engine: the sampler chain hands its samplers the
model's tokenizer, so string breakers (and llama.cpp's default set) work; a chain without one
refuses strings as a bad request."""

from __future__ import annotations

import pytest
import torch

from pyagent_core.errors import RequestError
from pyagent_core.interfaces.grammar import TokenizerInfo
from pyagent_core.registry import get_registry
from pyagent_engine.requests.params import SamplingParams
from pyagent_engine.requests.request import Request
from pyagent_engine.sampling.host import sampler_host
from pyagent_sampler_host.host import SamplerHost

VOCAB = [b"a", b"b", b"\n", b"c", b"<eos>"]
A, B, NEWLINE, C = 0, 1, 2, 3
INFO = TokenizerInfo(vocab=VOCAB, eos_token_ids=[4], encode=lambda text: [VOCAB.index(c.encode()) for c in text])


def greedy_token(chain: SamplerHost[Request], **dry: object) -> int:
    """The greedy token after "a b \\n c a b \\n" when c leads by 0.5: DRY takes it down unless a
    breaker stops the repeat "a b \\n" at the newline."""
    params = SamplingParams(temperature=0.0, extra={"dry_multiplier": 1.0, **dry})
    request = Request("r", [A, B, NEWLINE, C, A, B, NEWLINE], params)
    chain.check_params(request)
    logits = torch.tensor([[0.0, 0.0, 0.0, 0.5, 0.0]])
    (token,) = chain.sample([request], logits)
    return token


def test_string_breakers_and_the_default_set_reach_dry_through_the_chain() -> None:
    chain = sampler_host(get_registry(), len(VOCAB), "dry", eos_token_ids=[4], tokenizer_info=lambda: INFO)
    assert greedy_token(chain, dry_sequence_breakers=[]) != C
    assert greedy_token(chain, dry_sequence_breakers=["\n"]) == C
    assert greedy_token(chain) == C  # unset: llama.cpp's default set, which holds "\n"
    assert greedy_token(chain, dry_sequence_breakers=[[NEWLINE]]) == C


def test_a_chain_without_a_tokenizer_refuses_string_breakers() -> None:
    chain = sampler_host(get_registry(), len(VOCAB), "dry", eos_token_ids=[4])
    with pytest.raises(RequestError, match=r"dry_sequence_breakers holds strings \['\\n'\], which need the model's"):
        greedy_token(chain, dry_sequence_breakers=["\n"])
    assert greedy_token(chain) != C  # no tokenizer, no default set


def test_the_engine_gives_dry_its_tokenizer(llm_bf16) -> None:
    """Explicit default strings give what unset breakers give, without an error; no breakers differ."""
    prompt = "Repeat these lines forever:\none\ntwo\none\ntwo\none\ntwo\none\ntwo\none"

    def run(**breakers: object) -> list[int]:
        params = SamplingParams(temperature=0.0, max_tokens=12,
                                extra={"dry_multiplier": 3.0, "dry_allowed_length": 2, **breakers})
        (output,) = llm_bf16.generate([prompt], params)
        assert output.error is None
        return list(output.output_token_ids)

    default = run()
    assert run(dry_sequence_breakers=["\n", ":", '"', "*"]) == default
    assert run(dry_sequence_breakers=[]) != default
