"""pyagent's processors inside vLLM change its greedy tokens exactly as they change pyagent's own engine.

Both engines run the same float32 SmolLM2 folder on the same token ids, greedy. They compute the
same model with different kernels (vLLM's oneDNN GEMMs and attention, pyagent's own), so their
logits differ in the last float32 bits and a long greedy run can flip at a near-tie; over the first
:data:`N` tokens of these prompts they agree, which the baseline test checks before any processor.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import pytest

pytest.importorskip("vllm")

N = 16
"""Tokens compared per request (see the module docstring)."""

PROMPTS = ("The capital of France is", "def fib(n):")
Request = tuple[list[int], dict[str, Any], bool]
"""Prompt token ids, pyagent parameters, ignore_eos."""
CHAT = "<|im_start|>user\nIs the sky blue? Answer yes or no.<|im_end|>\n<|im_start|>assistant\n"


def run_vllm(llm: Any, requests: list[Request]) -> list[list[int]]:
    from vllm import SamplingParams

    prompts = [{"prompt_token_ids": ids} for ids, _, _ in requests]
    params = [SamplingParams(temperature=0.0, max_tokens=N, ignore_eos=ignore, extra_args=extra or None)
              for _, extra, ignore in requests]
    return [list(o.outputs[0].token_ids) for o in llm.generate(prompts, params, use_tqdm=False)]


def run_pyagent(llm: Any, requests: list[Request]) -> list[list[int]]:
    from pyagent_engine.requests.params import SamplingParams

    params = [SamplingParams(temperature=0.0, max_tokens=N, ignore_eos=ignore, extra=extra)
              for _, extra, ignore in requests]
    outputs = llm.generate([ids for ids, _, _ in requests], params)
    assert all(o.error is None for o in outputs), [o.error for o in outputs]
    return [list(o.output_token_ids) for o in outputs]


@pytest.fixture(scope="module")
def baseline(vllm_llm: Any, pyagent_llm: Any) -> dict[str, Any]:
    """Each prompt's ids and greedy tokens, from both engines, with no pyagent parameter set."""
    ids = [pyagent_llm.tokenizer.encode(p) for p in PROMPTS]
    chat = pyagent_llm.tokenizer.encode(CHAT, add_special_tokens=False)
    requests: list[Request] = [(i, {}, True) for i in ids] + [(chat, {}, False)]
    return {"ids": ids, "chat": chat, "vllm": run_vllm(vllm_llm, requests),
            "pyagent": run_pyagent(pyagent_llm, requests)}


def test_idle_adapter_and_both_engines_agree(baseline: dict[str, Any]) -> None:
    """With no pyagent parameter the hosted processors stay out of the way: vLLM's greedy tokens are
    pyagent's (and vLLM without the adapter gives the same, see test_vllm_proposer)."""
    assert baseline["vllm"] == baseline["pyagent"]
    assert baseline["pyagent"][2][-1] == 2 and len(baseline["pyagent"][2]) < N  # the chat reply ends early


def cases(baseline: dict[str, Any]) -> dict[str, list[Request]]:
    """Parameters per processor, aimed at tokens the baseline chose so that each one changes something."""
    out: dict[str, list[Request]] = {}
    tokens = baseline["pyagent"]
    per_prompt: dict[str, Callable[[list[int]], dict[str, Any]]] = {
        "logit_bias": lambda t: {"logit_bias": {str(t[1]): -100.0, str(t[4]): 5.0}},
        "bad_words": lambda t: {"bad_words_ids": [[t[2], t[3]], [t[6]]]},
        "no_repeat_ngram": lambda t: {"no_repeat_ngram_size": 2},
        "penalties": lambda t: {"repetition_penalty": 1.5, "frequency_penalty": 0.5, "presence_penalty": 0.3},
        "dry": lambda t: {"dry_multiplier": 2.0, "dry_allowed_length": 1},
    }
    for name, make in per_prompt.items():
        out[name] = [(ids, make(t), True) for ids, t in zip(baseline["ids"], tokens[:len(PROMPTS)], strict=True)]
    out["min_tokens"] = [(baseline["chat"], {"min_tokens": len(tokens[2]) + 3}, False)]
    return out


def test_deterministic_processors_change_vllm_as_they_change_pyagent(
        baseline: dict[str, Any], vllm_llm: Any, pyagent_llm: Any) -> None:
    by_case = cases(baseline)
    requests = [r for rs in by_case.values() for r in rs]
    got, want = run_vllm(vllm_llm, requests), run_pyagent(pyagent_llm, requests)
    start = 0
    for name, rs in by_case.items():
        ours, theirs = got[start:start + len(rs)], want[start:start + len(rs)]
        before = [baseline["pyagent"][2 if name == "min_tokens" else i] for i in range(len(rs))]
        assert theirs != before, f"{name}: the parameters change nothing here, so they test nothing"
        assert ours == theirs, f"{name}: vLLM {ours} != pyagent {theirs}"
        start += len(rs)


def test_xtc_never_samples_the_top_token_when_two_pass_the_threshold(vllm_llm: Any, baseline: dict[str, Any]) -> None:
    """XTC at probability 1: whenever the two most likely tokens (vLLM's raw logprobs) are both above
    the threshold, the sampled token is not the most likely one. Without XTC, same seeds, it is."""
    from vllm import SamplingParams

    threshold = 0.1
    xtc = {"xtc_probability": 1.0, "xtc_threshold": threshold}
    prompts = [{"prompt_token_ids": ids} for ids in baseline["ids"] for _ in range(3)]
    seeds = range(len(prompts))

    def top_hits(extra: dict[str, Any] | None) -> tuple[int, int]:
        params = [SamplingParams(temperature=1.0, seed=s, max_tokens=24, logprobs=2, ignore_eos=True,
                                 extra_args=extra) for s in seeds]
        eligible = top = 0
        for output in vllm_llm.generate(prompts, params, use_tqdm=False):
            completion = output.outputs[0]
            for token, step in zip(completion.token_ids, completion.logprobs, strict=True):
                ranked = sorted(((lp.rank, tid, lp.logprob) for tid, lp in step.items() if lp.rank <= 2))
                if len(ranked) == 2 and all(lp >= math.log(threshold) for _, _, lp in ranked):
                    eligible += 1
                    top += token == ranked[0][1]
        return eligible, top

    eligible, top = top_hits(xtc)
    assert eligible >= 3 and top == 0, (eligible, top)
    control_eligible, control_top = top_hits(None)
    assert control_eligible >= 3 and control_top > 0, (control_eligible, control_top)


def test_a_bad_parameter_is_refused_at_admission(vllm_llm: Any, baseline: dict[str, Any]) -> None:
    from vllm import SamplingParams
    from vllm.exceptions import VLLMValidationError

    with pytest.raises(VLLMValidationError, match="dry_multiplier"):
        vllm_llm.generate([{"prompt_token_ids": baseline["ids"][0]}],
                          SamplingParams(max_tokens=2, extra_args={"dry_multiplier": -1.0}), use_tqdm=False)
