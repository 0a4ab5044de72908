"""Completions: prompt forms, echo, n, streaming, and 64 concurrent greedy streams against ``LLM.generate``."""

from __future__ import annotations

import asyncio
from typing import Any

from pyagent_engine.api.llm import LLM
from pyagent_engine.requests.params import SamplingParams

from .conftest import API_KEY, MODEL, Server

PROMPT = "The three primary colors are"


def test_prompt_forms_and_echo_agree_with_llm_generate(client: Any, llm: LLM) -> None:
    [expected] = llm.generate([PROMPT], SamplingParams(max_tokens=10, temperature=0))
    text = client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=10, temperature=0)
    ids = client.completions.create(model=MODEL, prompt=expected.prompt_token_ids, max_tokens=10, temperature=0)
    echoed = client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=10, temperature=0, echo=True)
    assert text.object == "text_completion"
    assert text.choices[0].text == ids.choices[0].text == expected.text
    assert echoed.choices[0].text == PROMPT + expected.text
    assert text.usage.prompt_tokens == len(expected.prompt_token_ids)
    assert text.usage.completion_tokens == len(expected.output_token_ids)


def test_list_of_prompts_times_n_orders_choices_prompt_major(client: Any, llm: LLM) -> None:
    prompts = [PROMPT, "Once upon a time"]
    expected = llm.generate(prompts, SamplingParams(max_tokens=6, temperature=0))
    reply = client.completions.create(model=MODEL, prompt=prompts, max_tokens=6, temperature=0, n=2)
    assert [c.index for c in reply.choices] == [0, 1, 2, 3]
    assert [c.text for c in reply.choices] == [expected[0].text] * 2 + [expected[1].text] * 2
    assert reply.usage.prompt_tokens == sum(len(o.prompt_token_ids) for o in expected)


def test_streamed_completion_with_echo_and_usage(client: Any) -> None:
    plain = client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=12, temperature=0, echo=True)
    chunks = list(client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=12, temperature=0, echo=True,
                                            stream=True, stream_options={"include_usage": True}))
    assert chunks[-1].choices == [] and chunks[-1].usage.total_tokens == plain.usage.total_tokens
    text = "".join(c.choices[0].text for c in chunks[:-1])
    assert text == plain.choices[0].text
    assert [c.choices[0].finish_reason for c in chunks[:-1]].count(None) == len(chunks) - 2


def test_64_concurrent_streams_each_finish_once_and_match_llm_generate(server: Server, llm: LLM) -> None:
    import openai

    prompts = [f"Question {i}: what is {i} plus {i + 3}? Answer:" for i in range(64)]
    expected = [o.text for o in llm.generate(prompts, SamplingParams(max_tokens=16, temperature=0))]

    async def one(client: openai.AsyncOpenAI, prompt: str) -> tuple[str, list[str]]:
        text, finishes = "", []
        async for chunk in await client.completions.create(model=MODEL, prompt=prompt, max_tokens=16, temperature=0,
                                                           stream=True):
            for choice in chunk.choices:
                text += choice.text
                if choice.finish_reason is not None:
                    finishes.append(choice.finish_reason)
        return text, finishes

    async def everyone() -> list[tuple[str, list[str]]]:
        client = openai.AsyncOpenAI(base_url=server.url + "/v1", api_key=API_KEY, max_retries=0, timeout=300)
        async with client:
            return await asyncio.gather(*(one(client, p) for p in prompts))

    results = asyncio.run(everyone())
    assert all(len(finishes) == 1 for _, finishes in results)
    assert [text for text, _ in results] == expected
