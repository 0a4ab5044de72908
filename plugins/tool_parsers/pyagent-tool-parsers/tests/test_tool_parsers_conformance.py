"""The conformance kit run against every tool parser, with fixtures in each family's published format."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

from fixtures import CASES, TOOLS

from pyagent_core.interfaces.tool_parser import ToolParser
from pyagent_core.testing.tool_parser import ToolParserCase, ToolParserConformance
from pyagent_core.types import ToolParserSpec
from pyagent_tool_parsers import parser, plugin


def registered() -> dict[str, ToolParserSpec]:
    """The specs the plugin registers, by name."""
    specs: list[ToolParserSpec] = []
    plugin.pyagent_register_tool_parsers(register=specs.append)
    return {spec.name: spec for spec in specs}


SPECS = registered()


class FamilyKit(ToolParserConformance):
    """The kit with this package's tools and the format's own writer for round trips."""

    tools = TOOLS

    def render_calls(self, parser: ToolParser, calls: Sequence[tuple[str, dict[str, Any]]]) -> str | None:
        assert isinstance(parser, parser_module.FormatToolParser)
        return parser.render(calls)


parser_module = parser


def family(name: str, cls: type, markers: tuple[str, ...], excludes: tuple[str, ...] = ()) -> type:
    """A kit test class for the family registered as ``name``."""
    attributes: dict[str, Any] = {
        "impl": cls, "spec": SPECS[name], "cases": CASES[name], "markers": markers, "roundtrip_excludes": excludes,
    }
    return type(f"Test{cls.__name__}", (FamilyKit,), attributes)


TestHermes = family("hermes", parser.HermesToolParser, ("<tool_call>", "</tool_call>"))
TestLlama3Json = family("llama3_json", parser.Llama3JsonToolParser, ("<|python_tag|>", "{", ";"))
TestPythonic = family("pythonic", parser.PythonicToolParser, ("[", "(", "<|python_start|>", "<|python_end|>"))
TestMistral = family("mistral", parser.MistralToolParser, ("[TOOL_CALLS]", "[ARGS]", "[CALL_ID]"))
TestQwen3Coder = family("qwen3_coder", parser.Qwen3CoderToolParser,
                        ("<tool_call>", "<function=", "<parameter=", "</parameter>", "</function>", "</tool_call>"),
                        ("</parameter>",))
TestDeepSeekV3 = family("deepseek_v3", parser.DeepSeekV3ToolParser,
                        ("<｜tool▁calls▁begin｜>", "<｜tool▁call▁begin｜>", "<｜tool▁sep｜>", "```json", "```",
                         "<｜tool▁call▁end｜>", "<｜tool▁calls▁end｜>"))
TestDeepSeekV31 = family("deepseek_v31", parser.DeepSeekV31ToolParser,
                         ("<｜tool▁calls▁begin｜>", "<｜tool▁call▁begin｜>", "<｜tool▁sep｜>", "<｜tool▁call▁end｜>"))
TestKimiK2 = family("kimi_k2", parser.KimiK2ToolParser,
                    ("<|tool_calls_section_begin|>", "<|tool_call_begin|>", "<|tool_call_argument_begin|>",
                     "<|tool_call_end|>", "<|tool_calls_section_end|>"))
TestGranite = family("granite", parser.GraniteToolParser, ("<|tool_call|>", "<tool_call>", "["))
TestInternLM = family("internlm", parser.InternLMToolParser, ("<|action_start|><|plugin|>", "<|action_end|>"))
TestJamba = family("jamba", parser.JambaToolParser, ("<tool_calls>", "</tool_calls>"))
TestGlm45 = family("glm45", parser.Glm45ToolParser,
                   ("<tool_call>", "<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>", "</tool_call>"),
                   ("</arg_value>",))
TestXlam = family("xlam", parser.XlamToolParser, ("[", "```json", "```", "<tool_call>", "</tool_call>"))
TestPhi4MiniJson = family("phi4_mini_json", parser.Phi4MiniJsonToolParser, ("functools", "["))
TestMinimaxM2 = family("minimax_m2", parser.MinimaxM2ToolParser,
                       ("<minimax:tool_call>", '<invoke name="', '<parameter name="', "</parameter>", "</invoke>"),
                       ("</parameter>",))
TestGptOss = family("gpt-oss", parser.GptOssToolParser,
                    ("<|start|>", "<|channel|>", "<|message|>", "<|end|>", "<|call|>", "to=functions.", "analysis"))


class TestGenericXml(FamilyKit):
    impl = parser.GenericToolParser
    spec = SPECS["generic"]
    options: ClassVar[dict[str, Any]] = {"start": "<call>", "end": "</call>", "body": "xml"}
    markers = ("<call>", "</call>", "<function=", "<parameter=")
    roundtrip_excludes = ("</parameter>",)
    cases = (
        ToolParserCase("text", content="text"),
        ToolParserCase("A <call><function=add><parameter=a>1</parameter><parameter=b>2.5</parameter>"
                       "</function></call> B",
                       content="A  B", calls=[("add", {"a": 1, "b": 2.5})]),
        ToolParserCase("<call><function=add><parameter=a>1", errors=1),
    )


class TestGenericJson(FamilyKit):
    impl = parser.GenericToolParser
    spec = SPECS["generic"]
    options: ClassVar[dict[str, Any]] = {"start": "<<CALL>>", "end": "", "body": "json"}
    markers = ("<<CALL>>", "{", "[")
    cases = (
        ToolParserCase("text", content="text"),
        ToolParserCase('<<CALL>>[{"name": "add", "arguments": {"a": 1, "b": 2.5}}]<<CALL>>{"name": "get_weather", '
                       '"arguments": {"city": "Paris"}} bye', content="bye",
                       calls=[("add", {"a": 1, "b": 2.5}), ("get_weather", {"city": "Paris"})]),
    )


class TestGenericPythonic(FamilyKit):
    impl = parser.GenericToolParser
    spec = SPECS["generic"]
    options: ClassVar[dict[str, Any]] = {"start": "<tools>", "end": "</tools>", "body": "pythonic"}
    markers = ("<tools>", "</tools>", "[", "(")
    cases = (
        ToolParserCase('Sure <tools>[add(a=1, b=2.5)]</tools>', content="Sure", calls=[("add", {"a": 1, "b": 2.5})]),
    )
