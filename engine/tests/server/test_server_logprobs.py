"""Logprobs in OpenAI's chat and completion shapes, against the engine's own records (``LLM.generate``, whose
records ``engine/tests/engine/test_logprobs.py`` checks against a float64 log-softmax of transformers' logits);
raw against processed mode; and ``/metrics``."""

from __future__ import annotations

import itertools
import math
from typing import Any

import httpx2

from pyagent_engine.api.llm import LLM
from pyagent_engine.requests.params import SamplingParams

from .conftest import API_KEY, MODEL, Server
from .test_server_chat import HELLO

ATOL = 1e-5
PROMPT = "The three primary colors are"


def _sorted_descending(values: list[float]) -> bool:
    return all(a >= b for a, b in itertools.pairwise(values))


def test_chat_logprobs_match_the_engine_streamed_and_not(client: Any, llm: LLM) -> None:
    kwargs = {"model": MODEL, "messages": HELLO, "max_tokens": 8, "temperature": 0, "logprobs": True,
              "top_logprobs": 5}
    reply = client.chat.completions.create(**kwargs)
    [expected] = llm.generate([HELLO], SamplingParams(max_tokens=8, temperature=0, logprobs=5))
    assert expected.logprobs is not None
    vocab = llm.engine.structured.tokenizer_info.vocab
    content = reply.choices[0].logprobs.content
    assert len(content) == reply.usage.completion_tokens == len(expected.logprobs)
    for entry, record in zip(content, expected.logprobs, strict=True):
        tops = [t.logprob for t in entry.top_logprobs]
        assert len(tops) == 5 and _sorted_descending(tops)
        assert math.isclose(entry.logprob, record.logprob, abs_tol=ATOL)
        assert math.isclose(entry.logprob, tops[0], abs_tol=ATOL)  # greedy takes the most likely token (raw mode)
        assert entry.token == entry.top_logprobs[0].token and entry.bytes == entry.top_logprobs[0].bytes
        assert [vocab[t] for t, _ in record.top] == [bytes(t.bytes) for t in entry.top_logprobs]
    assert b"".join(bytes(e.bytes) for e in content).decode("utf-8", "replace") == reply.choices[0].message.content
    streamed = [e for chunk in client.chat.completions.create(**kwargs, stream=True) for choice in chunk.choices
                if choice.logprobs for e in choice.logprobs.content]
    assert [(e.token, e.logprob) for e in streamed] == [(e.token, e.logprob) for e in content]


def test_completion_logprobs_with_echo_cover_prompt_and_output(client: Any, llm: LLM) -> None:
    reply = client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=6, temperature=0, logprobs=3, echo=True)
    [expected] = llm.generate([PROMPT], SamplingParams(max_tokens=6, temperature=0, logprobs=3, prompt_logprobs=3))
    assert expected.logprobs is not None and expected.prompt_logprobs is not None
    block = reply.choices[0].logprobs
    records = [*expected.prompt_logprobs, *expected.logprobs]
    assert len(block.tokens) == len(expected.prompt_token_ids) + len(expected.output_token_ids)
    assert block.token_logprobs[0] is None and block.top_logprobs[0] is None
    for logprob, top, record in zip(block.token_logprobs[1:], block.top_logprobs[1:], records[1:], strict=True):
        assert math.isclose(logprob, record.logprob, abs_tol=ATOL)
        assert len(top) in (3, 4) and max(top.values()) == max(lp for _, lp in record.top)
    vocab = llm.engine.structured.tokenizer_info.vocab
    ids = [*expected.prompt_token_ids, *expected.output_token_ids]
    assert b"".join(vocab[t] for t in ids).decode("utf-8", "replace") == reply.choices[0].text
    assert block.text_offset == [len(b"".join(vocab[t] for t in ids[:i]).decode("utf-8", "ignore"))
                                 for i in range(len(ids))]
    plain = client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=6, temperature=0, logprobs=3)
    assert plain.choices[0].logprobs.tokens == block.tokens[len(expected.prompt_token_ids):]


def test_processed_mode_differs_from_raw_when_a_processor_is_on(server: Server, small_server: Server) -> None:
    body = {"prompt": PROMPT, "max_tokens": 8, "temperature": 0.5, "seed": 3, "logprobs": 1}
    raw = server.post("/v1/completions", body).json()["choices"][0]
    processed = small_server.post("/v1/completions", body).json()["choices"][0]  # --logprobs-mode processed
    assert raw["text"] == processed["text"]  # the mode changes what is reported, never what is drawn
    pairs = list(zip(raw["logprobs"]["token_logprobs"], processed["logprobs"]["token_logprobs"], strict=True))
    assert any(abs(r - p) > 1e-3 for r, p in pairs)
    for (r, p), top in zip(pairs, raw["logprobs"]["top_logprobs"], strict=True):
        if math.isclose(r, max(top.values()), abs_tol=ATOL):  # temperature 0.5 sharpens: the top token gains
            assert p >= r - ATOL


def test_metrics_are_served_in_prometheus_text(server: Server, client: Any) -> None:
    client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=2, temperature=0)
    response = httpx2.get(server.url + "/metrics", timeout=30, headers={"Authorization": f"Bearer {API_KEY}"})
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/plain")
    finished = [line for line in response.text.splitlines()
                if line.startswith("pyagent:request_success_total{") and 'finished_reason="length"' in line]
    assert finished and float(finished[0].rsplit(" ", 1)[1]) >= 1
