"""``pyagent generate`` with a constraint: the record and summary name the backend; bad flags fail fast."""

from __future__ import annotations

import json
import subprocess

import pytest

from pyagent_core.registry import get_registry
from pyagent_engine.models.embedded import find_embedded_gguf
from pyagent_engine.testing.cli_batch import run_commands


def test_choice_record_and_summary_name_the_grammar_backend(cli, tmp_path):
    if find_embedded_gguf() is None or not get_registry().available("grammar"):
        pytest.skip("needs the embedded model and a grammar backend plugin")
    result = cli("generate", "Is the sky blue? Answer yes or no.", "--choice", "yes,no", "--max-tokens", "4",
                 "--json", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    record = json.loads(result.stdout)
    grammar = record["grammar"]
    assert record["text"] in ("yes", "no") and record["finish_reason"] == "stop"
    assert grammar["backend"] == record["backends"]["grammar"] == get_registry().default("grammar").name
    assert grammar["requested"] == "auto" and grammar["jump_forward_tokens"] >= 0
    summary = result.stderr.strip().splitlines()[-1]
    assert f"grammar={grammar['backend']}" in summary and "jump-forward tokens" in summary


def test_no_jump_forward_samples_every_token_and_writes_the_same(tmp_path):
    if find_embedded_gguf() is None or not get_registry().available("grammar"):
        pytest.skip("needs the embedded model and a grammar backend plugin")
    args = ("generate", "Is the sky blue? Answer yes or no.", "--choice", "yes,no", "--max-tokens", "4", "--json")
    on, off = (json.loads(result.stdout) for result in run_commands(
        [(*args, *extra) for extra in ((), ("--no-jump-forward",))], cwd=tmp_path))
    assert on["grammar"]["jump_forward_tokens"] >= 1  # end-of-sequence, alone in the mask after a choice
    assert off["grammar"]["jump_forward_tokens"] == 0
    assert (off["text"], off["finish_reason"]) == (on["text"], on["finish_reason"])


def whitespace_outside_strings(text: str) -> str:
    """The whitespace characters of ``text`` that lie between JSON tokens (outside string literals)."""
    found, in_string, escaped = [], False, False
    for char in text:
        if in_string:
            escaped, in_string = (not escaped and char == "\\"), in_string and (escaped or char != '"')
        elif char == '"':
            in_string = True
        elif char.isspace():
            found.append(char)
    return "".join(found)


def test_json_whitespace_compact_leaves_no_whitespace_between_tokens(tmp_path):
    if find_embedded_gguf() is None or not get_registry().available("grammar"):
        pytest.skip("needs the embedded model and a grammar backend plugin")
    args = ("generate", "Describe a cat as a JSON object with three keys.", "--json-object", "--max-tokens", "40",
            "--json")
    compact, bounded = (json.loads(result.stdout)["text"] for result in run_commands(
        [(*args, "--json-whitespace", mode) for mode in ("compact", "bounded")], cwd=tmp_path))
    assert whitespace_outside_strings(compact) == "", compact
    assert whitespace_outside_strings(bounded) != "", bounded  # the model spaces its output when it may


BAD_FLAGS = [
    (("--regex", "a+", "--choice", "a,b"), "a request takes one constraint, got --regex and --choice"),
    (("--json-object", "--grammar", "g.ebnf"), "got --json-object and --grammar"),
    (("--json-schema", "missing.json"), "cannot read the JSON schema file missing.json"),
    (("--json-schema", "bad.json"), "the JSON schema is not valid JSON"),
    (("--json-schema", "latin1.json"), "the JSON schema file latin1.json is not UTF-8 (byte 0xe9 on line 1)"),
    (("--grammar", "latin1.ebnf"), "the grammar file latin1.ebnf is not UTF-8 (byte 0xe9 on line 2)"),
    (("--regex", "(a"), "regex '(a' does not parse"),
    (("--json-schema", "deep.json"), "the JSON schema nests 201 levels of objects and arrays, over the limit"),
    (("--json-schema", "dangling.json"), "$ref '#/$defs/item' does not resolve"),
    (("--grammar-backend", "xgrammar"), "--grammar-backend and --no-grammar-fallback need a constraint"),
    (("--json-object", "--json-whitespace", "free"), "--json-whitespace takes bounded, any, compact, got 'free'"),
    (("--regex", "a+", "--json-whitespace", "any"), "--json-whitespace applies to --json-schema and --json-object"),
]
"""Constraint flags refused before the model loads, and what the error says."""


@pytest.fixture(scope="module")
def refused(tmp_path_factory: pytest.TempPathFactory) -> list[subprocess.CompletedProcess[str]]:
    """``pyagent generate hi`` with each of :data:`BAD_FLAGS`, in one process, in a folder holding the files
    they name (each command its own status and output)."""
    folder = tmp_path_factory.mktemp("constraints")
    (folder / "bad.json").write_text('{"type": ')
    (folder / "latin1.json").write_bytes('{"enum": ["café"]}'.encode("latin-1"))
    (folder / "latin1.ebnf").write_bytes('root ::= "a"\n  | "café"\n'.encode("latin-1"))
    deep: dict = {"type": "integer"}
    for _ in range(100):
        deep = {"type": "object", "properties": {"a": deep}}
    (folder / "deep.json").write_text(json.dumps(deep))
    (folder / "dangling.json").write_text('{"type": "array", "items": {"$ref": "#/$defs/item"}}')
    return run_commands([("generate", "hi", *args) for args, _ in BAD_FLAGS], cwd=folder)


@pytest.mark.parametrize("case", range(len(BAD_FLAGS)), ids=[" ".join(args) for args, _ in BAD_FLAGS])
def test_bad_constraint_flags_fail_before_loading_the_model(refused, case):
    message, result = BAD_FLAGS[case][1], refused[case]
    assert result.returncode == 2 and message in result.stderr, result.stderr
    assert "Traceback" not in result.stderr and len(result.stderr.strip().splitlines()) == 1, result.stderr


def test_summary_names_the_keywords_no_backend_enforced():
    from types import SimpleNamespace

    from pyagent_engine.cli.constraints import grammar_notes
    from pyagent_engine.requests.structured_report import Skip, StructuredReport

    report = StructuredReport("auto", "xgrammar", (Skip("guidance", "compile failed"),), unenforced=("uniqueItems",))
    note = grammar_notes([SimpleNamespace(structured=report)])
    assert note.endswith("NOT ENFORCED (no backend enforces them): uniqueItems (xgrammar)")
    assert report.to_dict()["unenforced"] == ["uniqueItems"]
    assert "NOT ENFORCED" not in grammar_notes([SimpleNamespace(structured=StructuredReport("auto", "xgrammar"))])
