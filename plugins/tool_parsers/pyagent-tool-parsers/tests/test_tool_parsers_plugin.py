"""Registration, round trips of the BFCL calls, tools validation, constraints, detection and the pipeline."""

from __future__ import annotations

import importlib.metadata
import json
import subprocess
import sys
from pathlib import Path

import pytest
from fixtures import ADD, PARIS, TOOLS

from pyagent_core.errors import RequestError
from pyagent_core.interfaces.tool_parser import ToolParserContext
from pyagent_core.lazy import import_impl
from pyagent_core.parsing import build_message_parser, detect_tool_parser
from pyagent_core.testing.streaming import merge_deltas
from pyagent_core.types import ToolParserSpec
from pyagent_engine.benchmarks.parsers import DEFAULT_DATA, load_bfcl
from pyagent_tool_parsers import formats, parser, plugin

VLLM_NAMES = {"hermes", "llama3_json", "pythonic", "mistral", "qwen3_coder", "deepseek_v3", "deepseek_v31", "granite",
              "internlm", "jamba", "kimi_k2", "glm45", "xlam", "phi4_mini_json", "minimax_m2", "gpt-oss"}


def specs() -> dict[str, ToolParserSpec]:
    found: list[ToolParserSpec] = []
    plugin.pyagent_register_tool_parsers(register=found.append)
    return {spec.name: spec for spec in found}


def test_registers_the_vllm_names_and_generic() -> None:
    assert set(specs()) == VLLM_NAMES | {"generic"}
    points = {(p.name, p.value) for p in importlib.metadata.entry_points(group="pyagent")}
    assert ("tool-parsers", "pyagent_tool_parsers.plugin") in points
    for spec in specs().values():
        assert issubclass(import_impl(spec.impl), parser.FormatToolParser)


def test_listing_imports_no_parser_code() -> None:
    code = ("import sys, pyagent_tool_parsers.plugin as p; p.pyagent_register_tool_parsers(register=lambda s: None); "
            "print([m for m in sys.modules if m.startswith(('pyagent_tool_parsers.', 'pyagent_parser_base', "
            "'jsonschema', 'torch'))])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "['pyagent_tool_parsers.plugin']"


BFCL = load_bfcl(DEFAULT_DATA) if DEFAULT_DATA.is_dir() else ([], [])


@pytest.mark.skipif(not BFCL[1], reason=f"no BFCL data in {DEFAULT_DATA}")
@pytest.mark.parametrize("name", sorted(formats.FORMATS))
def test_bfcl_calls_round_trip_exactly(name: str) -> None:
    tools, calls = BFCL
    cls = import_impl(specs()[name].impl)
    context = ToolParserContext(tools=tools)
    renders = [cls({}, context).render]
    if name == "mistral":
        renders.append(formats.render_mistral_list)
    for render in renders:
        text = render(calls)
        result = cls({}, context).extract(text)
        assert not result.errors, result.errors
        assert [(c.name, json.loads(c.arguments)) for c in result.tool_calls] == calls
        for single in calls:  # and one call per message
            got = cls({}, context).extract(render([single]))
            assert [(c.name, json.loads(c.arguments)) for c in got.tool_calls] == [single]
        streamed = cls({}, context)
        deltas = [streamed.extract_delta(text[:i], text[i:i + 7]) for i in range(0, len(text), 7)]
        merged = merge_deltas([*deltas, streamed.finish(text)], name).decoded(name)
        assert list(merged.calls) == calls


def test_bfcl_has_the_forty_instances() -> None:
    if not BFCL[1]:
        pytest.skip("no BFCL data")
    assert len(BFCL[1]) == 40 and len(BFCL[0]) >= 40


def test_malformed_tools_are_a_request_error() -> None:
    with pytest.raises(RequestError, match="not an OpenAI function definition"):
        parser.HermesToolParser({}, ToolParserContext(tools=[{"type": "function", "function": {}}]))
    bad_schema = [{"type": "function", "function": {"name": "f", "parameters": {"type": "no-such-type"}}}]
    with pytest.raises(RequestError, match="schema of tool 'f' is invalid"):
        hermes = parser.HermesToolParser({}, ToolParserContext(tools=bad_schema))
        hermes.extract('<tool_call>{"name": "f", "arguments": {}}</tool_call>')


def test_xml_and_pythonic_formats_refuse_json_constraints() -> None:
    for cls in (parser.Qwen3CoderToolParser, parser.Glm45ToolParser, parser.PythonicToolParser):
        with pytest.raises(RequestError, match="does not write arguments as JSON"):
            cls({}, ToolParserContext(tools=TOOLS)).constraint_for("required")


def test_named_constraint_is_the_format_around_the_schema() -> None:
    constraint = parser.DeepSeekV31ToolParser({}, ToolParserContext(tools=TOOLS)).constraint_for(
        {"type": "function", "function": {"name": "add"}})
    assert constraint is not None and constraint.structural_tag is not None
    tag = json.loads(constraint.structural_tag)
    assert tag["triggers"] == ["<｜tool▁calls▁begin｜>"]
    assert tag["structures"] == [{"begin": "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>add<｜tool▁sep｜>",
                                  "schema": TOOLS[1]["function"]["parameters"],
                                  "end": "<｜tool▁call▁end｜><｜tool▁calls▁end｜>"}]


TEMPLATES = {  # distinctive fragments of the families' published chat templates
    "hermes": "{{- '<tool_call>\\n' }}{{ tool_call | tojson }}{{- '\\n</tool_call>' }}",
    "qwen3_coder": "<tool_call>\\n<function={{ name }}>\\n<parameter={{ k }}>\\n{{ v }}\\n</parameter>",
    "glm45": "<tool_call>{{ tc.name }}<arg_key>{{ k }}</arg_key><arg_value>{{ v }}</arg_value></tool_call>",
    "deepseek_v3": "'<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>' + tool['type'] + '<｜tool▁sep｜>' + name"
                   " + '\\n```json'",
    "deepseek_v31": "'<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>' + name + '<｜tool▁sep｜>' + arguments",
    "kimi_k2": "<|tool_calls_section_begin|>{% for tc in tool_calls %}<|tool_call_begin|>",
    "mistral": "{{- '[TOOL_CALLS]' }}{{ tool_call.function.name }}[ARGS]",
    "gpt-oss": "<|start|>assistant<|channel|>commentary to=functions.{{ name }} <|constrain|>json<|message|>",
    "minimax_m2": "<minimax:tool_call>\\n<invoke name=\"{{ name }}\">",
}


@pytest.mark.parametrize("expected", sorted(TEMPLATES))
def test_detects_the_parser_from_a_chat_template(expected: str) -> None:
    assert detect_tool_parser(TEMPLATES[expected]) == expected


def test_detects_nothing_in_a_plain_template() -> None:
    assert detect_tool_parser("{% for m in messages %}<|im_start|>{{ m.content }}{% endfor %}") is None


def test_pipeline_streams_like_it_parses() -> None:
    text = ("<think>\nweather?\n</think>\nSure.\n<tool_call>\n" + json.dumps({"name": PARIS[0], "arguments": PARIS[1]})
            + "\n</tool_call>\n<tool_call>\n" + json.dumps({"name": ADD[0], "arguments": ADD[1]}) + "\n</tool_call>")
    whole = build_message_parser("hermes", "qwen3", tools=TOOLS).parse(text)
    assert whole.reasoning_content == "weather?" and whole.content == "Sure." and not whole.errors
    assert [(c.name, json.loads(c.arguments)) for c in whole.tool_calls] == [PARIS, ADD]
    for step in (1, 3, 11):
        stream = build_message_parser("hermes", "qwen3", tools=TOOLS)
        deltas = [stream.feed(text[i:i + step]) for i in range(0, len(text), step)]
        merged = merge_deltas([*deltas, stream.finish()], "pipeline")
        assert (merged.content, merged.reasoning) == ("Sure.", "weather?")
        assert [(n, json.loads(a)) for n, a in merged.calls] == [PARIS, ADD]


def test_cli_parse_prints_the_openai_message(tmp_path: Path) -> None:
    tools = tmp_path / "tools.json"
    tools.write_text(json.dumps(list(TOOLS)), encoding="utf-8")
    text = '[TOOL_CALLS]add[ARGS]{"a": 1, "b": 2.5}[TOOL_CALLS]nope[ARGS]{}'
    run = subprocess.run([sys.executable, "-m", "pyagent_core.cli", "parse", "--tool-parser", "mistral", "--tools",
                          str(tools), "--json"], input=text, capture_output=True, text=True)
    message = json.loads(run.stdout)
    assert run.returncode == 1 and "no such tool" in run.stderr and "Traceback" not in run.stderr
    assert message["role"] == "assistant" and message["content"] is None and message["reasoning_content"] is None
    assert [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in message["tool_calls"]] == [ADD]
    bad = subprocess.run([sys.executable, "-m", "pyagent_core.cli", "parse", "--tool-parser", "nope"], input="x",
                         capture_output=True, text=True)
    assert bad.returncode == 2 and "choose one of" in bad.stderr and "Traceback" not in bad.stderr
