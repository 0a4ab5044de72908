"""The conformance kit run against every reasoning parser, with fixtures in each family's published format."""

from __future__ import annotations

from typing import Any, ClassVar

from pyagent_core.testing.reasoning_parser import ReasoningCase as Case
from pyagent_core.testing.reasoning_parser import ReasoningParserConformance
from pyagent_core.types import ReasoningParserSpec
from pyagent_reasoning_parsers import parser, plugin


def registered() -> dict[str, ReasoningParserSpec]:
    """The specs the plugin registers, by name."""
    specs: list[ReasoningParserSpec] = []
    plugin.pyagent_register_reasoning_parsers(register=specs.append)
    return {spec.name: spec for spec in specs}


SPECS = registered()
THINK = ("<think>", "</think>")

# A reply whose template opened <think> in the prompt (DeepSeek-R1, MiniMax-M2, Kimi-K2 Thinking).
FORCED = (
    Case("Let me think.\n</think>\n\nThe answer is 4.", reasoning="Let me think.", content="The answer is 4."),
    Case("<think>\nHmm, 2+2.\n</think>\n\n4", reasoning="Hmm, 2+2.", content="4"),
    Case("Still thinking about 東京 🌧 and </think", reasoning="Still thinking about 東京 🌧 and </think"),
    Case("</think>Only an answer.", content="Only an answer."),
    Case("a <think> b </think> c </think> d", reasoning="a <think> b", content="c </think> d"),
)
# A reply that opens its own block (Qwen3, GLM-4.5).
OPENED = (
    Case("<think>\nCount: 1, 2.\n</think>\n\nTwo.", reasoning="Count: 1, 2.", content="Two."),
    Case("No thinking here, 東京 🌧.", content="No thinking here, 東京 🌧."),
    Case("<think></think>\n\nDirect.", content="Direct."),
    Case("<think>\ntruncated thoughts", reasoning="truncated thoughts"),
    Case("Answer first <think>not reasoning</think>", content="Answer first <think>not reasoning</think>"),
)


class TestDeepSeekR1(ReasoningParserConformance):
    impl = parser.DeepSeekR1ReasoningParser
    spec = SPECS["deepseek_r1"]
    cases = FORCED
    markers = THINK


class TestMinimaxM2(ReasoningParserConformance):
    impl = parser.MinimaxM2ReasoningParser
    spec = SPECS["minimax_m2"]
    cases = FORCED
    markers = THINK


class TestKimiK2(ReasoningParserConformance):
    impl = parser.KimiK2ReasoningParser
    spec = SPECS["kimi_k2"]
    cases = (*FORCED, Case(
        "I need the weather.<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0"
        '<|tool_call_argument_begin|>{"city": "Paris"}<|tool_call_end|><|tool_calls_section_end|>',
        reasoning="I need the weather.",
        content='<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>'
                '{"city": "Paris"}<|tool_call_end|><|tool_calls_section_end|>'))
    markers = (*THINK, "<|tool_calls_section_begin|>")


# Qwen3 may start its tool calls without closing its thinking: the call ends reasoning, stays content.
QWEN3_CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'


class TestQwen3(ReasoningParserConformance):
    impl = parser.Qwen3ReasoningParser
    spec = SPECS["qwen3"]
    cases = (*OPENED, Case(f"<think>\nI need the weather.\n{QWEN3_CALL}", reasoning="I need the weather.",
                           content=QWEN3_CALL))
    markers = (*THINK, "<tool_call>")


class TestQwen3ForcedOpen(ReasoningParserConformance):
    impl = parser.Qwen3ReasoningParser
    spec = SPECS["qwen3"]
    options: ClassVar[dict[str, Any]] = {"forced_open": True}
    cases = (*FORCED, Case(f"I need the weather.{QWEN3_CALL}", reasoning="I need the weather.", content=QWEN3_CALL))
    markers = (*THINK, "<tool_call>")


class TestGlm45(ReasoningParserConformance):
    impl = parser.Glm45ReasoningParser
    spec = SPECS["glm45"]
    cases = OPENED
    markers = THINK


class TestMistral(ReasoningParserConformance):
    impl = parser.MistralReasoningParser
    spec = SPECS["mistral"]
    cases = (
        Case("[THINK]Let me see: 17 is prime.[/THINK]Yes, 17 is prime.", reasoning="Let me see: 17 is prime.",
             content="Yes, 17 is prime."),
        Case("Plain answer with [THINK] inside.", content="Plain answer with [THINK] inside."),
        Case("[THINK]cut off", reasoning="cut off"),
    )
    markers = ("[THINK]", "[/THINK]")


class TestGranite(ReasoningParserConformance):
    impl = parser.GraniteReasoningParser
    spec = SPECS["granite"]
    cases = (
        Case("Here is my thought process:\nThe user greets me.\n\nHere is my response:\nHello!",
             reasoning="The user greets me.", content="Hello!"),
        Case("Here's my thought process:\n東京 is Tokyo.\nHere's my response:\nTokyo.", reasoning="東京 is Tokyo.",
             content="Tokyo."),
        Case("Hello there.", content="Hello there."),
    )
    markers = ("Here is my thought process:", "Here is my response:", "Here's my response:")


class TestGptOss(ReasoningParserConformance):
    impl = parser.GptOssReasoningParser
    spec = SPECS["gpt-oss"]
    cases = (
        Case("<|channel|>analysis<|message|>User asks 2+2.<|end|>"
             "<|start|>assistant<|channel|>final<|message|>4<|return|>",
             reasoning="User asks 2+2.", content="4"),
        Case('<|channel|>analysis<|message|>Need weather.<|end|><|start|>assistant<|channel|>commentary '
             'to=functions.get_weather <|constrain|>json<|message|>{"city": "Paris"}<|call|>',
             reasoning="Need weather.",
             content='<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>'
                     '{"city": "Paris"}<|call|>'),
        Case("<|channel|>analysis<|message|>still thinking about 東京", reasoning="still thinking about 東京"),
        Case("plain text", content="plain text"),
    )
    markers = ("<|channel|>", "<|message|>", "<|end|>", "<|start|>", "analysis", "final")


class TestGeneric(ReasoningParserConformance):
    impl = parser.GenericReasoningParser
    spec = SPECS["generic"]
    options: ClassVar[dict[str, Any]] = {"open": "<reasoning>", "close": "</reasoning>"}
    cases = (
        Case("<reasoning>why</reasoning>what", reasoning="why", content="what"),
        Case("what", content="what"),
    )
    markers = ("<reasoning>", "</reasoning>")
